package vmspec_test

import (
	"fmt"
	"math"
	"math/big"
	"os"
	"path"
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

// podUID and kubeletDir place the kubelet's volume directories in the mounts.
const (
	podUID     = "8d3f0c1e-5b1a-4c2e-9f00-0123456789ab"
	kubeletDir = "/var/lib/kubelet/pods/" + podUID
)

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
//   - mounts: containerd's defaults, then the kubelet's mounts sorted
//     stably by depth (orderedMounts); a configMap or secret volume comes
//     from .../volumes/kubernetes.io~configmap/<name>, a subPath mount from
//     .../volume-subpaths/<name>/<container>/<index>.
//
// Limits the kubelet's int64 arithmetic cannot hold are the caller's to
// refuse (apiLimitsOK).
func criSpec(pod *corev1.Pod) *specs.Spec {
	c := &pod.Spec.Containers[0]
	ann := map[string]string{
		vmspec.CRISandboxID:        "5a3d0c9b",
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

	mounts := []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc"},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs"},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts"},
		{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue"},
		{Destination: "/sys", Type: "sysfs", Source: "sysfs"},
		{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup"},
	}
	vols := map[string]*corev1.Volume{}
	for i := range pod.Spec.Volumes {
		vols[pod.Spec.Volumes[i].Name] = &pod.Spec.Volumes[i]
	}
	var kubelet []specs.Mount
	for i, m := range c.VolumeMounts {
		src := kubeletDir + "/volumes/" + volumeKind(vols[m.Name]) + "/" + m.Name
		if m.SubPath != "" {
			src = fmt.Sprintf("%s/volume-subpaths/%s/%s/%d", kubeletDir, m.Name, c.Name, i)
		}
		kubelet = append(kubelet, specs.Mount{Destination: m.MountPath, Type: "bind", Source: src, Options: []string{"rbind", "rprivate", "ro"}})
	}
	kubelet = append(kubelet,
		specs.Mount{Destination: "/etc/hosts", Type: "bind", Source: kubeletDir + "/etc-hosts", Options: []string{"rbind", "rprivate", "rw"}},
		specs.Mount{Destination: "/dev/termination-log", Type: "bind", Source: kubeletDir + "/containers/" + c.Name + "/0", Options: []string{"rbind", "rprivate", "rw"}},
		specs.Mount{Destination: "/etc/hostname", Type: "bind", Source: "/var/lib/containerd/sandboxes/5a3d0c9b/hostname", Options: []string{"rbind", "rprivate", "rw"}},
	)
	sort.SliceStable(kubelet, func(i, j int) bool {
		return strings.Count(path.Clean(kubelet[i].Destination), "/") < strings.Count(path.Clean(kubelet[j].Destination), "/")
	})

	return &specs.Spec{
		Version:     specs.Version,
		Hostname:    pod.Name,
		Annotations: ann,
		Mounts:      append(mounts, kubelet...),
		Linux: &specs.Linux{
			Resources:   res,
			Devices:     devices,
			CgroupsPath: "kubepods-pod" + podUID + ".slice:cri-containerd:0123",
		},
	}
}

// volumeKind is the kubelet's plugin directory of a volume.
func volumeKind(v *corev1.Volume) string {
	switch {
	case v == nil:
		return "kubernetes.io~empty-dir"
	case v.ConfigMap != nil:
		return "kubernetes.io~configmap"
	case v.Secret != nil:
		return "kubernetes.io~secret"
	case v.PersistentVolumeClaim != nil:
		return "kubernetes.io~csi/pvc-" + v.Name + "/mount"
	}
	return "kubernetes.io~empty-dir"
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
