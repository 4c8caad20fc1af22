package vmspec_test

import (
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/vmpod/vmpod/pkg/vmspec"
	. "github.com/vmpod/vmpod/pkg/vmspec/vmspectest"
)

// FuzzFrontDoorsAgree builds a pod from fuzzed annotations, limits and
// volumes, and the OCI spec containerd's CRI plugin writes for its
// container (criSpec). The scheduler and render read the pod (FromPod), the
// shim reads the OCI spec (FromOCI, with a node's default MountRules,
// containerd's image volumes among them): both
// must accept it or both refuse it (with InvalidArgument), and when they
// accept, the Specs must be equal, their Shares among them.
//
// vols is a list of volumes, ';' between them, ',' between fields:
//
//	b,<name>,<devicePath>   a PVC volume as a block device
//	e,<name>,<devicePath>   an ephemeral volume as a block device
//	c,<name>,<mountPath>    a configMap volume, mounted
//	s,<name>,<mountPath>    a secret volume, mounted
//	a,<name>,<mountPath>    a downwardAPI volume, mounted
//	j,<name>,<mountPath>    a projected volume, mounted
//	d,<name>,<mountPath>    an emptyDir volume, mounted
//	p,<name>,<mountPath>    a persistentVolumeClaim volume, mounted
//	q,<name>,<mountPath>    a persistentVolumeClaim volume with readOnly, mounted
//	h,<name>,<mountPath>    a hostPath volume of /srv/<name>, mounted
//	i,<name>,<mountPath>    an image volume of registry.example/<name>:v1, mounted
//	m,<name>,<mountPath>[,<subPath>]   one more mount of a volume
//	r,<name>,<mountPath>[,<subPath>]   one more mount of a volume, readOnly
//
// Pods the apiserver would refuse are skipped (frontDoorPod), and so are
// the two the node cannot tell from others (frontDoorPod says which).
func FuzzFrontDoorsAgree(f *testing.F) {
	f.Add(vmspec.AnnotationFirmware, "uefi", "", "", "2", "256Mi", "b,data,/dev/data")
	f.Add(vmspec.AnnotationCloudInitVolume, "seed", vmspec.AnnotationBoot, "disk", "1500m", "1Gi", "c,seed,/cloud-init;b,data,/dev/xvdb")
	f.Add(vmspec.AnnotationCloudInitVolume, "seed", "", "", "0", "512Mi", "c,seed,/z;m,seed,/a/b;m,seed,/a,user-data")
	f.Add(vmspec.AnnotationCloudInitVolume, "keys", "", "", "", "512Mi", "s,keys,/etc/keys;m,keys,/k,meta-data")
	f.Add(vmspec.AnnotationDiskBus, "scsi", "", "", "255", "1Ti", "b,a,/dev/a/data;b,b,/dev/b/data;e,scratch,/dev/scratch-disk-number-1")
	f.Add(vmspec.AnnotationNetwork, "none", "example.com/x", "y", "1m", "64Mi", "b,d,relative")
	f.Add("vmpod.io/firmwre", "uefi", "", "", "256", "63Mi", "")
	f.Add(vmspec.AnnotationCloudInitVolume, "seed", "", "", "1", "256Mi", "c,seed,/ci;i,data,/data;m,data,/data/etc,etc;r,data,/boot,boot/")
	f.Add(vmspec.AnnotationSSHAuthorizedKeys, "ssh-ed25519 AAAA me", vmspec.AnnotationAccel, "tcg", "1", "1073741825", "b,x,/dev/data;b,y,/dev/data")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2, cpu, mem, vols string) {
		pod, ok := frontDoorPod(k1, v1, k2, v2, cpu, mem, vols)
		if !ok {
			return
		}
		oci := criSpec(pod)
		fromPod, errPod := vmspec.FromPod(pod)
		fromOCI, errOCI := vmspec.FromOCI(oci, vmspec.MountRules{})
		for _, err := range []error{errPod, errOCI} {
			if err != nil && !errdefs.IsInvalidArgument(err) {
				t.Fatalf("error is not InvalidArgument: %v", err)
			}
		}
		switch {
		case errPod == nil && errOCI != nil:
			t.Fatalf("FromPod accepts the pod, FromOCI refuses its OCI spec: %v", errOCI)
		case errPod != nil && errOCI == nil:
			t.Fatalf("FromOCI accepts the OCI spec, FromPod refuses the pod: %v", errPod)
		case errPod == nil:
			if diff := cmp.Diff(fromPod, fromOCI); diff != "" {
				t.Fatalf("FromPod vs FromOCI (-pod +oci):\n%s", diff)
			}
		}
	})
}

// frontDoorPod builds the pod FuzzFrontDoorsAgree tries, or reports that
// the apiserver would refuse it (or that the kubelet's arithmetic could not
// hold its limits: apiLimitsOK): both front doors only ever see pods that
// passed the apiserver.
func frontDoorPod(k1, v1, k2, v2, cpu, mem, vols string) (*corev1.Pod, bool) {
	p := MakePod("fuzz").UID(podUID)
	for _, kv := range [][2]string{{k1, v1}, {k2, v2}} {
		if kv[0] != "" {
			p.Annotation(kv[0], kv[1])
		}
	}
	if errs := apivalidation.ValidateAnnotations(p.Annotations, field.NewPath("metadata", "annotations")); len(errs) > 0 {
		return nil, false
	}
	limits := p.Spec.Containers[0].Resources.Limits
	for r, s := range map[corev1.ResourceName]string{corev1.ResourceCPU: cpu, corev1.ResourceMemory: mem} {
		if s == "" {
			delete(limits, r)
			continue
		}
		if hugeExponent(s) {
			return nil, false
		}
		q, err := resource.ParseQuantity(s)
		if err != nil {
			return nil, false
		}
		limits[r] = q
	}
	if !apiLimitsOK(limits) {
		return nil, false
	}
	// The apiserver stores a quantity in its canonical form, which is what
	// the kubelet and the scheduler read: "0000e2200000000" is "0" (whose
	// exponent the kubelet's arithmetic, criSpec here, would otherwise
	// raise 10 to; the fuzzer's worker hung on it).
	for r, q := range limits {
		limits[r] = resource.MustParse(q.String())
	}

	c := &p.Spec.Containers[0]
	var names, devicePaths, mountPaths, hostPaths []string
	for entry := range strings.SplitSeq(vols, ";") {
		if entry == "" {
			continue
		}
		f := strings.Split(entry, ",")
		if len(f) < 3 || len(f) > 4 || validation.IsDNS1123Label(f[1]) != nil || f[2] == "" {
			return nil, false
		}
		kind, name, where := f[0], f[1], f[2]
		more := kind == "m" || kind == "r" // one more mount of a volume
		if !more && len(f) != 3 || more && !slices.Contains(names, name) {
			return nil, false
		}
		if !more {
			if slices.Contains(names, name) {
				return nil, false // volume names are unique
			}
			names = append(names, name)
		}
		switch kind {
		case "b", "e":
			if slices.Contains(devicePaths, where) {
				return nil, false // so are device paths
			}
			devicePaths = append(devicePaths, where)
			if kind == "b" {
				p.BlockVolume(name, name+"-claim", where)
				continue
			}
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
				Ephemeral: &corev1.EphemeralVolumeSource{},
			}})
			c.VolumeDevices = append(c.VolumeDevices, corev1.VolumeDevice{Name: name, DevicePath: where})
		case "c", "s", "a", "j", "d", "p", "q", "h", "i", "m", "r":
			if slices.Contains(mountPaths, where) {
				return nil, false // and mount paths
			}
			mountPaths = append(mountPaths, where)
			sub := ""
			if len(f) == 4 {
				sub = f[3]
			}
			// The apiserver refuses a subPath that is absolute or steps
			// back (validateLocalDescendingPath).
			if sub != "" && (path.IsAbs(sub) || slices.Contains(strings.Split(sub, "/"), "..")) {
				return nil, false
			}
			// The node sees a subPath only as the kubelet's bind mount
			// of it under volume-subpaths, whatever the volume: it
			// cannot tell a hostPath volume's subPath from a pod
			// volume's, and shares it. FromPod refuses the pod.
			if more && sub != "" && slices.Contains(hostPaths, name) {
				return nil, false
			}
			switch kind {
			case "c":
				p.ConfigMapVolume(name, name, where)
			case "s":
				p.SecretVolume(name, name, where)
			case "a":
				p.DownwardAPIVolume(name, where)
			case "j":
				p.ProjectedVolume(name, where)
			case "d":
				p.EmptyDirVolume(name, where)
			case "p":
				p.ClaimVolume(name, name+"-claim", where)
			case "q":
				p.ReadOnlyClaimVolume(name, name+"-claim", where)
			case "h":
				hostPaths = append(hostPaths, name)
				p.HostPathVolume(name, "/srv/"+name, where)
			case "i":
				p.ImageVolume(name, "registry.example/"+name+":v1", where)
			case "m":
				p.VolumeMount(name, where, sub)
			case "r":
				p.ReadOnlyVolumeMount(name, where, sub)
			}
		default:
			return nil, false
		}
	}
	// The kubelet mounts a relative mountPath at /<mountPath>: two mounts
	// the apiserver lets through ("data", "/data") are then one path,
	// where the node sees the last.
	seen := map[string]bool{}
	for _, m := range mountPaths {
		abs := m
		if !path.IsAbs(abs) {
			abs = path.Clean("/" + abs)
		}
		if seen[abs] {
			return nil, false
		}
		seen[abs] = true
	}
	for _, d := range devicePaths {
		if slices.Contains(mountPaths, d) {
			return nil, false // a device path may not be a mount path
		}
	}
	return p.Obj(), true
}

// hugeExponent reports a quantity whose exponent ("1e2200000000") is far
// beyond any the kubelet can hold: apimachinery's ParseQuantity rounds such
// a value by computing 10 to that power, which takes minutes (the fuzzer's
// worker hung on one), and no pod limit the kubelet acts on has one.
func hugeExponent(s string) bool {
	i := strings.IndexAny(s, "eE")
	if i < 0 {
		return false
	}
	exp, err := strconv.ParseInt(s[i+1:], 10, 64)
	return err == nil && (exp > 100 || exp < -100)
}
