package vmspec

import (
	"errors"
	"fmt"
	"math"
	"math/big"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// FromPod builds the Spec of a VM pod and validates it. Every problem is
// reported at once, each naming its annotation or pod field.
//
// It does not look at runtimeClassName: whether a pod is a VM pod is the
// caller's decision (the scheduler plugin's args, render's flag).
func FromPod(pod *corev1.Pod) (Spec, error) {
	if pod == nil {
		return Spec{}, invalid("pod", "", "is nil")
	}
	var s Spec
	errs := []error{applyAnnotations(&s, pod.Annotations)}
	s.Name = DomainName(pod.Namespace, pod.Name)

	if n := len(pod.Spec.InitContainers); n > 0 {
		errs = append(errs, invalid("spec.initContainers", "", fmt.Sprintf("a VM pod has no init containers; found %d", n)))
	}
	if n := len(pod.Spec.Containers); n != 1 {
		errs = append(errs, invalid("spec.containers", "", fmt.Sprintf("a VM pod has exactly one container, the VM; found %d", n)))
		return s, errors.Join(errs...)
	}
	c := &pod.Spec.Containers[0]
	s.Image = c.Image
	if sc := c.SecurityContext; sc != nil && sc.Privileged != nil && *sc.Privileged {
		errs = append(errs, invalid("spec.containers[0].securityContext.privileged", "true", privilegedDetail))
	}

	vcpus, mem, err := resourcesFromLimits(c.Resources.Limits)
	s.VCPUs, s.MemoryBytes = vcpus, mem
	errs = append(errs, err)

	vols := podVolumes(pod)
	for i, d := range c.VolumeDevices {
		field := fmt.Sprintf("spec.containers[0].volumeDevices[%d]", i)
		v, ok := vols[d.Name]
		if !ok {
			errs = append(errs, invalid(field+".name", d.Name, "no volume of that name in spec.volumes"))
			continue
		}
		// As the apiserver requires: only a claim can be a block device. A
		// hostPath (or any other source) named here would otherwise become
		// a disk of the VM.
		if v.PersistentVolumeClaim == nil && v.Ephemeral == nil {
			errs = append(errs, invalid(field+".name", d.Name, "the volume must be a persistentVolumeClaim or an ephemeral volume"))
			continue
		}
		id := volumeID(d.DevicePath)
		s.Volumes = append(s.Volumes, Volume{Name: id, DevicePath: d.DevicePath, Serial: id})
	}

	cloudInitPath := ""
	if s.CloudInit != nil && s.CloudInit.Volume != "" {
		errs = append(errs, resolveCloudInitVolume(s.CloudInit, c, vols))
		cloudInitPath = s.CloudInit.VolumeMountPath
	}
	shares, err := sharesFromVolumeMounts(pod.Spec.Volumes, c.VolumeMounts, cloudInitPath)
	s.Shares = shares
	errs = append(errs, err, s.Validate())
	return s, errors.Join(errs...)
}

// resourcesFromLimits maps limits.cpu to vCPUs (rounded up; 1 when absent
// or 0, which the kubelet also treats as no limit) and
// limits.memory to guest RAM (required, rounded down to whole MiB so the
// guest never gets more than the pod asked for).
//
// A quantity is compared before it is read as a number: Quantity.Value
// and MilliValue wrap modulo 2^64 above the int64 range, so a memory limit
// of 2^64 bytes plus 1Gi would read as a 1Gi guest, and a cpu limit of
// 2^64/1000 cores plus one as 1 vCPU.
func resourcesFromLimits(limits corev1.ResourceList) (int, uint64, error) {
	const field = "spec.containers[0].resources.limits"
	var err error
	vcpus := 1
	if q, ok := limits[corev1.ResourceCPU]; ok {
		switch mag := magnitude(q); {
		case q.Sign() < 0:
			err = invalid(field+".cpu", q.String(), "must be positive")
		case q.Sign() == 0:
			// The kubelet gives a limit of 0 no CFS quota, so the node
			// (FromOCI) cannot tell it from no limit: neither can we.
		case mag > 19 || q.Cmp(*resource.NewQuantity(MaxVCPUs, resource.DecimalSI)) > 0:
			// The error names the value as written; vcpus stays 1 so
			// that Validate does not report the field a second time.
			err = invalid(field+".cpu", q.String(), fmt.Sprintf("at most %d vCPUs", MaxVCPUs))
		case mag <= 0:
			// Under one core: one vCPU.
		default:
			vcpus = int((q.MilliValue() + 999) / 1000)
		}
	}
	// A missing memory limit leaves 0, which Validate reports.
	q := limits[corev1.ResourceMemory]
	return vcpus, memoryBytes(q), err
}

// memoryBytes is q in whole MiB, rounded down; 0 for a q that is not
// positive, and the largest whole-MiB uint64 for one above the int64
// range (Validate refuses both).
func memoryBytes(q resource.Quantity) uint64 {
	switch mag := magnitude(q); {
	case q.Sign() <= 0, mag <= 0:
		return 0
	case mag > 19 || q.Cmp(*resource.NewQuantity(math.MaxInt64, resource.BinarySI)) > 0:
		return math.MaxUint64 &^ (1<<20 - 1)
	}
	v := q.Value()
	if v <= 0 {
		return 0
	}
	return uint64(v) &^ (1<<20 - 1)
}

// magnitude is how many digits q's integer part has (0 or less: |q| < 1),
// from its digits and exponent, without computing 10^exponent. A pod
// author may write a limit of 1e95555594 or 1e-95555594, which parse, and
// comparing either exactly (Quantity.Cmp, Value) spends minutes in
// big-number arithmetic: in the scheduler, for every cycle of that pod.
// Past 19 digits a quantity is beyond int64; within it, Cmp is cheap.
func magnitude(q resource.Quantity) int64 {
	d := q.AsDec()
	return int64(len(new(big.Int).Abs(d.UnscaledBig()).String())) - int64(d.Scale())
}

func podVolumes(pod *corev1.Pod) map[string]*corev1.Volume {
	m := make(map[string]*corev1.Volume, len(pod.Spec.Volumes))
	for i := range pod.Spec.Volumes {
		m[pod.Spec.Volumes[i].Name] = &pod.Spec.Volumes[i]
	}
	return m
}

func resolveCloudInitVolume(ci *CloudInit, c *corev1.Container, vols map[string]*corev1.Volume) error {
	v, ok := vols[ci.Volume]
	if !ok {
		return invalid(AnnotationCloudInitVolume, ci.Volume, "no volume of that name in spec.volumes")
	}
	if v.ConfigMap == nil && v.Secret == nil {
		return invalid(AnnotationCloudInitVolume, ci.Volume, "the volume must be a configMap or a secret")
	}
	// A subPath mount shows part of the volume, not its files user-data
	// and meta-data; and of several mounts the shim sees them in
	// containerd's order, not the pod's: both front doors take the least
	// mount path of the mounts of the whole volume (see FromOCI).
	for _, m := range c.VolumeMounts {
		if p := kubeletMountPath(m.MountPath); m.Name == ci.Volume && m.SubPath == "" && m.SubPathExpr == "" &&
			(ci.VolumeMountPath == "" || p < ci.VolumeMountPath) {
			ci.VolumeMountPath = p
		}
	}
	if ci.VolumeMountPath == "" {
		return invalid(AnnotationCloudInitVolume, ci.Volume, "the container must mount the whole volume (volumeMounts, without subPath) so the runtime can read it")
	}
	return nil
}
