package vmspec

import (
	"errors"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/vmpod/vmpod/pkg/ocikeys"
)

// Annotations containerd's CRI plugin puts on the OCI spec of each task
// (pkg/ocikeys, which the shim reads without this package).
const (
	CRIContainerType     = ocikeys.CRIContainerType
	CRIContainerName     = ocikeys.CRIContainerName
	CRIImageName         = ocikeys.CRIImageName
	CRISandboxID         = ocikeys.CRISandboxID
	CRISandboxName       = ocikeys.CRISandboxName
	CRISandboxNamespace  = ocikeys.CRISandboxNamespace
	CRISandboxUID        = ocikeys.CRISandboxUID
	CRISandboxMemory     = ocikeys.CRISandboxMemory
	CRIContainerTypeSbx  = ocikeys.CRIContainerTypeSbx
	CRIContainerTypeCntr = ocikeys.CRIContainerTypeCntr
)

// PodInterface is the interface the CRI's CNI call makes in a pod's
// network namespace, whose address is the pod IP the guest takes over.
const PodInterface = ocikeys.PodInterface

// FromOCI builds the Spec from the OCI runtime spec of the VM's container task,
// as containerd hands it to a shim: the pod's vmpod.io/ annotations (passed
// through with pod_annotations = ["vmpod.io/*"]), io.kubernetes.cri.* facts,
// the container's cgroup limits, its block devices, and its bind mounts:
// those rules accepts are the Shares, and one it refuses is an error
// naming the mount.
func FromOCI(spec *specs.Spec, rules MountRules) (Spec, error) {
	if spec == nil {
		return Spec{}, invalid("oci spec", "", "is nil")
	}
	ann := spec.Annotations
	var s Spec
	errs := []error{applyAnnotations(&s, ann)}
	if t := ann[CRIContainerType]; t == CRIContainerTypeSbx {
		return s, invalid(CRIContainerType, t, "the sandbox task holds the pod; only the container task is a VM")
	}
	s.Name = DomainName(ann[CRISandboxNamespace], firstNonEmpty(ann[CRISandboxName], spec.Hostname, "vm"))
	s.Image = ann[CRIImageName]
	if privileged(spec) {
		return s, invalid("securityContext.privileged", "true", privilegedDetail)
	}

	s.VCPUs = 1
	if l := spec.Linux; l != nil && l.Resources != nil {
		if c := l.Resources.CPU; c != nil && c.Quota != nil && *c.Quota > 0 && c.Period != nil && *c.Period > 0 {
			s.VCPUs = int((uint64(*c.Quota) + *c.Period - 1) / *c.Period)
		}
		if m := l.Resources.Memory; m != nil && m.Limit != nil && *m.Limit > 0 {
			s.MemoryBytes = uint64(*m.Limit) &^ (1<<20 - 1)
		}
	}
	if l := spec.Linux; l != nil {
		for _, d := range l.Devices {
			if d.Type != "b" {
				continue
			}
			id := volumeID(d.Path)
			s.Volumes = append(s.Volumes, Volume{Name: id, DevicePath: d.Path, Serial: id})
		}
	}
	pod, mounts := rules.forPod(ann[CRISandboxUID], ann[CRISandboxID]), visibleMounts(spec.Mounts)
	cloudInitPath := ""
	if s.CloudInit != nil && s.CloudInit.Volume != "" {
		errs = append(errs, resolveCloudInitMount(s.CloudInit, mounts, pod))
		cloudInitPath = s.CloudInit.VolumeMountPath
	}
	shares, err := sharesFromMounts(mounts, pod, cloudInitPath)
	s.Shares = shares
	errs = append(errs, err, s.Validate())
	return s, errors.Join(errs...)
}

// resolveCloudInitMount finds the cloud-init volume among the visible
// mounts (one a later mount hides is not what the node would read): the
// kubelet mounts this pod's configMap or secret volume from
// <pod dir>/volumes/kubernetes.io~configmap/<volume name> (a subPath mount
// comes from .../volume-subpaths/ and is not the whole volume; a hostPath
// that ends the same way is no volume of this pod). Of several mounts it
// takes the least destination, as FromPod does: containerd sorts mounts by
// depth, so their order here is not the pod's.
func resolveCloudInitMount(ci *CloudInit, mounts []specs.Mount, pod podMountRules) error {
	for _, m := range mounts {
		src := strings.TrimSuffix(m.Source, "/")
		isVolume := pod.podDir != "" && (src == pod.podDir+"/volumes/kubernetes.io~configmap/"+ci.Volume ||
			src == pod.podDir+"/volumes/kubernetes.io~secret/"+ci.Volume)
		if isVolume && (ci.VolumeMountPath == "" || m.Destination < ci.VolumeMountPath) {
			ci.VolumeMountPath = m.Destination
		}
	}
	if ci.VolumeMountPath == "" {
		return invalid(AnnotationCloudInitVolume, ci.Volume, "no configMap or secret volume of that name is mounted in the container")
	}
	return nil
}

func firstNonEmpty(v ...string) string {
	for _, s := range v {
		if s != "" {
			return s
		}
	}
	return ""
}

// privilegedDetail is why a VM pod may not be privileged.
const privilegedDetail = "a VM pod cannot be privileged: the runtime hands a privileged container every host device, " +
	"and every block device would become a disk of the VM; the guest has its own kernel and needs no privilege on the node"

// privileged reports whether spec is what containerd's CRI plugin writes
// for a privileged container: every capability in the bounding set and no
// masked paths. (The CRI passes no privileged flag to the runtime.)
func privileged(spec *specs.Spec) bool {
	if spec.Linux == nil || len(spec.Linux.MaskedPaths) > 0 || spec.Process == nil || spec.Process.Capabilities == nil {
		return false
	}
	return slices.Contains(spec.Process.Capabilities.Bounding, "CAP_SYS_ADMIN") &&
		slices.Contains(spec.Process.Capabilities.Bounding, "CAP_SYS_MODULE")
}
