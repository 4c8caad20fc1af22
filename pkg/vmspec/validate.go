package vmspec

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

const (
	// MinMemoryBytes is the least guest RAM vmpod starts a VM with.
	MinMemoryBytes = 64 << 20
	// MaxMemoryBytes is the most guest RAM a VM may have (1 TiB): far above
	// what a node of today gives one pod, and low enough that no sum of
	// memory, overhead and the pod's other containers overflows.
	MaxMemoryBytes = 1 << 40
	// MaxVCPUs is QEMU's limit for x86 q35 without an IOMMU; the node's own
	// limit (host.Host.MaxVCPUs) is checked where the VM is placed.
	MaxVCPUs = 255

	fieldLimits = "spec.containers[0].resources.limits"
)

// Validate reports every problem of s, each naming its field or annotation
// and, for fixed sets, the accepted values. It checks only what s says on
// its own; whether a node can run it is for pkg/convert and the scheduler.
func (s Spec) Validate() error {
	var errs []error
	add := func(err error) { errs = append(errs, err) }

	if s.Name == "" || strings.ContainsAny(s.Name, "/\x00") {
		add(invalid("name", s.Name, "want a non-empty domain name without '/'"))
	}
	switch {
	case s.VCPUs < 1:
		add(invalid(fieldLimits+".cpu", itoa(s.VCPUs), "want at least 1 vCPU"))
	case s.VCPUs > MaxVCPUs:
		add(invalid(fieldLimits+".cpu", itoa(s.VCPUs), fmt.Sprintf("at most %d vCPUs", MaxVCPUs)))
	}
	switch {
	case s.MemoryBytes == 0:
		add(invalid(fieldLimits+".memory", "", "required: it is the guest's RAM"))
	case s.MemoryBytes < MinMemoryBytes:
		add(invalid(fieldLimits+".memory", fmt.Sprintf("%dMi", s.MemoryBytes>>20), "want at least 64Mi"))
	case s.MemoryBytes > MaxMemoryBytes:
		add(invalid(fieldLimits+".memory", fmt.Sprintf("%dGi", s.MemoryBytes>>30), "at most 1Ti of guest RAM"))
	case s.MemoryBytes%(1<<20) != 0:
		add(invalid(fieldLimits+".memory", fmt.Sprint(s.MemoryBytes), "want whole MiB"))
	}

	add(s.validateMaxima())

	add(oneOf(AnnotationAccel, string(s.Accel)))
	add(oneOf(AnnotationFirmware, string(s.Firmware)))
	add(oneOf(AnnotationBoot, string(s.Boot.Source)))
	add(oneOf(AnnotationDiskBus, string(s.DiskBus)))
	if s.MemoryHotplug != "" {
		add(oneOf(AnnotationMemoryHotplug, string(s.MemoryHotplug)))
	}
	if s.Machine == "" || !namePattern.MatchString(s.Machine) {
		add(invalid(AnnotationMachine, s.Machine, "want a QEMU machine type such as q35"))
	}
	add(s.validateCPU())
	if s.Boot.Source == BootDisk && s.Boot.Cmdline != "" {
		add(invalid(AnnotationKernelCmdline, s.Boot.Cmdline, "applies to direct kernel boot only, and vmpod.io/boot is disk"))
	}
	add(s.validateVolumes())
	add(s.validateShares())
	add(s.validateCloudInit())
	return errors.Join(errs...)
}

func oneOf(key, v string) error {
	info, _ := annotationInfo(key)
	if !slices.Contains(info.Values, v) {
		return notOneOf(key, v, info.Values...)
	}
	return nil
}

func (s Spec) validateCPU() error {
	if s.CPU.Model == "" || !namePattern.MatchString(s.CPU.Model) {
		return invalid(AnnotationCPUModel, s.CPU.Model, "want auto, host-passthrough, host-model or a libvirt CPU model name")
	}
	if s.CPU.Model == CPUModelHostPassthrough && s.Accel == AccelTCG {
		return invalid(AnnotationCPUModel, s.CPU.Model, "needs KVM, and vmpod.io/accel is tcg")
	}
	for _, f := range s.CPU.Features {
		if !featurePattern.MatchString(f) {
			return invalid(AnnotationCPUFeatures, f, "want a libvirt CPU feature name such as avx2")
		}
		if slices.Contains(NestedFeatures, f) && !s.CPU.Nested {
			return invalid(AnnotationCPUFeatures, f, "nested virtualisation is off: ask for it with "+AnnotationNestedVirt+": on (accepted values: off, on)")
		}
	}
	return nil
}

// validateMaxima checks the live-resize maxima against the size the VM
// starts with. Limits outside their own range are reported by Validate.
func (s Spec) validateMaxima() error {
	var errs []error
	if s.MaxVCPUs != 0 && s.VCPUs >= 1 && s.MaxVCPUs < s.VCPUs {
		errs = append(errs, invalid(AnnotationMaxVCPUs, itoa(s.MaxVCPUs),
			fmt.Sprintf("is below the VM's %d vCPUs (%s.cpu); want at least that", s.VCPUs, fieldLimits)))
	}
	if s.MaxVCPUs > MaxVCPUs {
		errs = append(errs, invalid(AnnotationMaxVCPUs, itoa(s.MaxVCPUs), fmt.Sprintf("at most %d vCPUs", MaxVCPUs)))
	}
	if m := s.MaxMemoryBytes; m != 0 && s.MemoryBytes >= MinMemoryBytes {
		mi := fmt.Sprintf("%dMi", m>>20)
		switch {
		case m > MaxMemoryBytes:
			errs = append(errs, invalid(AnnotationMaxMemory, mi, "at most 1Ti of guest RAM"))
		case m < s.MemoryBytes:
			errs = append(errs, invalid(AnnotationMaxMemory, mi,
				fmt.Sprintf("is below the VM's %dMi (%s.memory); want at least that", s.MemoryBytes>>20, fieldLimits)))
		case (m-s.MemoryBytes)%MemoryBlockBytes != 0:
			errs = append(errs, invalid(AnnotationMaxMemory, mi,
				fmt.Sprintf("must exceed the VM's %dMi (%s.memory) by a multiple of 2Mi, the block memory is added in", s.MemoryBytes>>20, fieldLimits)))
		case s.DIMMs() && s.HotplugMemoryBytes()%s.DIMMBytes() != 0:
			errs = append(errs, invalid(AnnotationMaxMemory, mi,
				fmt.Sprintf("with %s: %s, must exceed the VM's %dMi (%s.memory) by a multiple of %dMi, the size of each DIMM (a multiple of 128Mi, the guest's memory block, large enough for at most %d DIMMs)",
					AnnotationMemoryHotplug, MemoryHotplugDIMM, s.MemoryBytes>>20, fieldLimits, s.DIMMBytes()>>20, MaxDIMMs)))
		}
	}
	if s.MemoryHotplug == MemoryHotplugDIMM && s.HotplugMemoryBytes() == 0 && s.MemoryBytes >= MinMemoryBytes {
		errs = append(errs, invalid(AnnotationMemoryHotplug, string(s.MemoryHotplug),
			fmt.Sprintf("DIMMs add RAM up to %s, which is unset or not above %s.memory; set it, or drop %s", AnnotationMaxMemory, fieldLimits, AnnotationMemoryHotplug)))
	}
	return errors.Join(errs...)
}

func (s Spec) validateVolumes() error {
	seen := map[string]bool{}
	for i, v := range s.Volumes {
		field := fmt.Sprintf("spec.containers[0].volumeDevices[%d]", i)
		switch {
		case v.DevicePath == "":
			return invalid(field+".devicePath", "", "required")
		case v.Name == "" || !volumeIDPattern.MatchString(v.Name):
			return invalid(field+".devicePath", v.DevicePath, fmt.Sprintf("no valid volume name %q", v.Name))
		case seen[v.Name]:
			return invalid(field+".devicePath", v.DevicePath, fmt.Sprintf("gives the disk serial %q of an earlier device", v.Name))
		case v.Serial == "" || len(v.Serial) > MaxSerialLen:
			return invalid(field+".devicePath", v.DevicePath, fmt.Sprintf("disk serial %q is empty or longer than %d characters", v.Serial, MaxSerialLen))
		}
		seen[v.Name] = true
	}
	return nil
}

func (s Spec) validateCloudInit() error {
	ci := s.CloudInit
	if ci == nil {
		return nil
	}
	if ci.Volume != "" && (ci.UserData != "" || ci.NetworkConfig != "") {
		return invalid(AnnotationCloudInitVolume, ci.Volume,
			"give cloud-init data either in a volume or inline (vmpod.io/cloud-init-user-data, vmpod.io/cloud-init-network-config), not both")
	}
	if ci.Volume != "" && ci.VolumeMountPath == "" {
		return invalid(AnnotationCloudInitVolume, ci.Volume, "the container must mount the volume")
	}
	return nil
}
