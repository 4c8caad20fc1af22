package vmspec_test

import (
	"crypto/sha256"
	"fmt"
	"math"
	"math/big"
	"os"
	"path"
	"slices"
	"sort"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/vmpod/vmpod/pkg/vmspec"
)

// The kubelet's CFS arithmetic (pkg/kubelet/cm and kuberuntime's
// calculateLinuxResources, with the default cpuCFSQuota and
// cpuCFSQuotaPeriod): the kubelet turns limits into CRI resources, and
// containerd's CRI plugin copies those into the OCI spec (WithResources).
const (
	kubeletQuotaPeriod    = 100000 // µs, the default --cpu-cfs-quota-period
	kubeletMinQuotaPeriod = 1000
	kubeletMinShares      = 2
	kubeletMaxShares      = 262144
	kubeletSharesPerCPU   = 1024
)

// podUID is the UID of the pods whose OCI spec the tests build: the
// kubelet's dirs of the pod are under /var/lib/kubelet/pods/<podUID>.
const podUID = "8d3f0c1e-5b1a-4c2e-9f00-0123456789ab"

// criSpec is the OCI runtime spec of pod's one container as containerd's CRI
// plugin writes it (internal/cri/server/container_create.go and
// internal/cri/opts) from the CreateContainer request the kubelet sends for
// that pod, with pod_annotations = ["vmpod.io/*"]:
//
//   - annotations: DefaultCRIAnnotations (sandbox id, name, namespace and
//     uid, container name, the image as the pod spells it, which the
//     kubelet passes as UserSpecifiedImage, container type) and the pod's
//     annotations that path.Match the runtime's pod_annotations;
//   - resources: the memory limit (and swap equal to it), CFS period,
//     quota = milliCPU*period/1000 (at least 1000, none for 0) and shares
//     from the request, which the apiserver defaults to the limit;
//   - devices: one block device per volumeDevice, at its devicePath, in pod
//     order, each with its device cgroup rule;
//   - mounts: containerd's defaults, then the container's bind mounts
//     (containerMounts).
//
// Limits the kubelet's int64 arithmetic cannot hold are the caller's to
// refuse (apiLimitsOK).
func criSpec(pod *corev1.Pod) *specs.Spec {
	c := &pod.Spec.Containers[0]
	ann := map[string]string{
		vmspec.CRISandboxID:        criSandboxID,
		vmspec.CRISandboxNamespace: pod.Namespace,
		vmspec.CRISandboxUID:       string(pod.UID),
		vmspec.CRISandboxName:      pod.Name,
		vmspec.CRIContainerName:    c.Name,
		vmspec.CRIImageName:        c.Image,
		vmspec.CRIContainerType:    vmspec.CRIContainerTypeCntr,
	}
	for k, v := range pod.Annotations {
		if ok, _ := path.Match("vmpod.io/*", k); ok {
			ann[k] = v
		}
	}

	res := &specs.LinuxResources{
		Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}},
		CPU:     &specs.LinuxCPU{},
		Memory:  &specs.LinuxMemory{},
	}
	cpuLimit := c.Resources.Limits.Cpu().MilliValue()
	cpuRequest := cpuLimit // the apiserver's default for a missing request
	if q, ok := c.Resources.Requests[corev1.ResourceCPU]; ok {
		cpuRequest = q.MilliValue()
	}
	period := uint64(kubeletQuotaPeriod)
	res.CPU.Period = &period
	if cpuLimit != 0 {
		quota := max(cpuLimit*kubeletQuotaPeriod/1000, kubeletMinQuotaPeriod)
		res.CPU.Quota = &quota
	}
	shares := uint64(min(max(cpuRequest*kubeletSharesPerCPU/1000, kubeletMinShares), kubeletMaxShares))
	res.CPU.Shares = &shares
	if mem := c.Resources.Limits.Memory().Value(); mem != 0 {
		res.Memory.Limit = &mem
		res.Memory.Swap = &mem
	}

	var devices []specs.LinuxDevice
	for i, d := range c.VolumeDevices {
		major, minor := int64(252), int64(i)
		devices = append(devices, specs.LinuxDevice{Path: d.DevicePath, Type: "b", Major: major, Minor: minor, FileMode: new(os.FileMode(0o660))})
		res.Devices = append(res.Devices, specs.LinuxDeviceCgroup{Allow: true, Type: "b", Major: &major, Minor: &minor, Access: "mrw"})
	}

	return &specs.Spec{
		Version:     specs.Version,
		Hostname:    pod.Name,
		Annotations: ann,
		Mounts:      append(containerdDefaultMounts(), containerMounts(pod)...),
		Linux: &specs.Linux{
			Resources:   res,
			Devices:     devices,
			CgroupsPath: "kubepods-pod" + podUID + ".slice:cri-containerd:0123",
		},
	}
}

// containerdDefaultMounts are the mounts of containerd's default spec
// that are not bind mounts.
func containerdDefaultMounts() []specs.Mount {
	return []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}},
		{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
		{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: []string{"nosuid", "noexec", "nodev", "relatime", "ro"}},
	}
}

// containerMounts are the bind mounts of pod's container:
//
//   - the kubelet's CRI mounts (makeMounts, pkg/kubelet/kubelet_pods.go):
//     each volumeMount at its mountPath made absolute, from the volume's
//     dir under the pod dir (kubeletVolumeDir; a hostPath volume: its
//     host path), a subPath mount from the bind mount the kubelet made
//     under volume-subpaths/<volume>/<container>/<index> (of any volume,
//     hostPath too), read-only when the volumeMount or the volume plugin
//     says (kubeletMountsReadOnly); the pod's hosts file, unless a
//     volumeMount is at /etc/hosts; the termination log (kuberuntime);
//   - containerd's own files from the sandbox's dirs where the kubelet
//     mounts nothing (linuxContainerMounts: hostname, hosts, resolv.conf,
//     /dev/shm);
//   - all as containerd's WithMounts writes them: type bind, options
//     rbind, rprivate and ro or rw, sorted stably by depth.
func containerMounts(pod *corev1.Pod) []specs.Mount {
	c := &pod.Spec.Containers[0]
	podDir := vmspec.DefaultKubeletRoot + "/pods/" + string(pod.UID)
	vols := map[string]*corev1.Volume{}
	for i := range pod.Spec.Volumes {
		vols[pod.Spec.Volumes[i].Name] = &pod.Spec.Volumes[i]
	}
	type criMount struct {
		dst, src string
		ro       bool
	}
	var cri []criMount
	etcHosts := true
	for i, m := range c.VolumeMounts {
		v := vols[m.Name]
		src := kubeletVolumeDir(podDir, v)
		switch {
		case v.Image != nil:
			// containerd mounts the image itself; the kubelet passes the
			// subPath as image_sub_path, which containerd joins to the
			// image's dir (and resolves).
			src = path.Join(containerdImageVolume(v.Image.Reference), m.SubPath)
		case m.SubPath != "":
			src = fmt.Sprintf("%s/volume-subpaths/%s/%s/%d", podDir, m.Name, c.Name, i)
		}
		dst := m.MountPath
		if !path.IsAbs(dst) {
			dst = path.Clean("/" + dst)
		}
		cri = append(cri, criMount{dst, src, m.ReadOnly || kubeletMountsReadOnly(v)})
		etcHosts = etcHosts && m.MountPath != "/etc/hosts"
	}
	if etcHosts {
		cri = append(cri, criMount{"/etc/hosts", podDir + "/etc-hosts", false})
	}
	cri = append(cri, criMount{"/dev/termination-log", podDir + "/containers/" + c.Name + "/0a1b2c3d", false})
	all := cri
	for _, f := range []string{"hostname", "hosts", "resolv.conf", "shm"} {
		dst := "/etc/" + f
		if f == "shm" {
			dst = "/dev/shm"
		}
		if !slices.ContainsFunc(cri, func(m criMount) bool { return path.Clean(m.dst) == dst }) {
			all = append(all, criMount{dst, "/var/lib/containerd/io.containerd.grpc.v1.cri/sandboxes/" + criSandboxID + "/" + f, false})
		}
	}
	sort.SliceStable(all, func(i, j int) bool {
		return strings.Count(path.Clean(all[i].dst), "/") < strings.Count(path.Clean(all[j].dst), "/")
	})
	var mounts []specs.Mount
	for _, m := range all {
		mode := "rw"
		if m.ro {
			mode = "ro"
		}
		mounts = append(mounts, specs.Mount{Destination: m.dst, Type: "bind", Source: m.src, Options: []string{"rbind", "rprivate", mode}})
	}
	return mounts
}

// criSandboxID is the sandbox ID criSpec gives the pod.
const criSandboxID = "5a3d0c9b"

// containerdImageVolume is where containerd's CRI mounts an image volume
// of the pod (internal/cri/server/container_image_mount.go): below its
// default state dir, the sandbox's dir, the image's manifest digest
// (here a hash of the reference, as the test has no registry).
func containerdImageVolume(reference string) string {
	return fmt.Sprintf("%s/%s/%x", vmspec.ContainerdImageVolumes(vmspec.DefaultContainerdStateDir), criSandboxID, sha256.Sum256([]byte(reference)))
}

// kubeletVolumeDir is where the kubelet mounts a volume of the pod
// (its volume plugin's GetPath): <pod dir>/volumes/kubernetes.io~<plugin>/<name>,
// a CSI volume's .../kubernetes.io~csi/<PV or volume name>/mount; a
// hostPath volume's is the host path itself.
func kubeletVolumeDir(podDir string, v *corev1.Volume) string {
	plugin := ""
	switch {
	case v.HostPath != nil:
		return v.HostPath.Path
	case v.ConfigMap != nil:
		plugin = "configmap/" + v.Name
	case v.Secret != nil:
		plugin = "secret/" + v.Name
	case v.DownwardAPI != nil:
		plugin = "downward-api/" + v.Name
	case v.Projected != nil:
		plugin = "projected/" + v.Name
	case v.EmptyDir != nil:
		plugin = "empty-dir/" + v.Name
	case v.PersistentVolumeClaim != nil, v.Ephemeral != nil:
		plugin = "csi/pvc-0f1e2d3c-" + v.Name + "/mount"
	case v.Image != nil:
		return "" // the runtime mounts it (containerdImageVolume)
	default:
		panic(fmt.Sprintf("criSpec: no kubelet dir for volume %q", v.Name))
	}
	return podDir + "/volumes/kubernetes.io~" + plugin
}

// kubeletMountsReadOnly reports whether the kubelet mounts every mount of
// v read-only: its volume plugin's Attributes().ReadOnly (configmap,
// secret, downwardapi, projected, image: true; emptydir: false; a claim's
// PV: the claim source's readOnly; hostpath: its mounter's readOnly, which
// an inline hostPath volume leaves false).
func kubeletMountsReadOnly(v *corev1.Volume) bool {
	switch {
	case v.ConfigMap != nil, v.Secret != nil, v.DownwardAPI != nil, v.Projected != nil, v.Image != nil:
		return true
	case v.PersistentVolumeClaim != nil:
		return v.PersistentVolumeClaim.ReadOnly
	}
	return false
}

// apiLimitsOK reports whether the kubelet can turn q into CRI resources
// without its int64 arithmetic wrapping: a cpu limit whose quota
// (milliCPU*100000) fits, a memory limit that fits in int64. Beyond that
// the node's numbers are garbage whatever vmpod does; FromPod, in the
// scheduler, refuses such pods before they reach a node.
func apiLimitsOK(l corev1.ResourceList) bool {
	for r, q := range l {
		if q.Sign() < 0 {
			return false // the apiserver refuses negative quantities
		}
		// Judge 1e33333331 or 1e-5000 by digits and exponent: Cmp would
		// compute 10^exponent (the fuzzer's worker timed out on one).
		d := q.AsDec()
		switch mag := int64(len(new(big.Int).Abs(d.UnscaledBig()).String())) - int64(d.Scale()); {
		case mag > 19:
			return false // beyond int64: the kubelet cannot hold it
		case mag < -19:
			continue // below a nano-unit: far under either bound
		}
		switch r {
		case corev1.ResourceCPU:
			if q.Cmp(*resource.NewQuantity(math.MaxInt64/kubeletQuotaPeriod/1000, resource.DecimalSI)) > 0 {
				return false
			}
		case corev1.ResourceMemory:
			if q.Cmp(*resource.NewQuantity(math.MaxInt64, resource.BinarySI)) > 0 {
				return false
			}
		}
	}
	return true
}
