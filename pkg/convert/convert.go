package convert

import (
	"fmt"

	"libvirt.org/go/libvirtxml"

	"github.com/vmpod/vmpod/pkg/host"
	"github.com/vmpod/vmpod/pkg/vmspec"
)

// Paths are the host paths the runtime prepared for one VM. Everything in
// them comes from the runtime, never from the pod.
type Paths struct {
	// Kernel and Initrd are the image's kernel (/boot/vmlinux or
	// /boot/vmlinuz) and initramfs; "" when the image ships none.
	Kernel string
	Initrd string
	// RootDisk is the qcow2 overlay whose backing file is the image's disk;
	// "" when the image has no disk.
	RootDisk string
	// BaseDisk and BaseFormat ("qcow2" or "raw") are the image's disk under
	// RootDisk. The domain names them as the overlay's whole backing chain,
	// so libvirt and QEMU follow nothing a pod author wrote into a header.
	BaseDisk   string
	BaseFormat string
	// Volumes maps each vmspec.Volume name to its host block device.
	Volumes map[string]string
	// Shares maps each vmspec.Share tag to the unix socket of the file
	// server (virtiofsd) the runtime started for it.
	Shares map[string]string
	// CloudInitISO is the NoCloud seed image; required when Spec.CloudInit is set.
	CloudInitISO string
	// NVRAM is the VM's own UEFI variable store; required for UEFI.
	NVRAM string
	// Console is the unix socket QEMU listens on for the serial console;
	// required when Spec.Console is set.
	Console string
	// GuestAgent is the unix socket of the QEMU guest agent channel; "" for none.
	GuestAgent string
	// NICs maps each vmspec.NIC name to the tap the runtime made for it.
	NICs map[string]NIC
	// Emulator, if set, stands in for the node's QEMU as the domain's
	// emulator (vmpod's jailer, pkg/jail, which execs QEMU confined), with
	// EmulatorEnv ("NAME=value" each) in its environment.
	Emulator    string
	EmulatorEnv []string
}

// NIC is the host side of one guest interface.
type NIC struct {
	// Tap is the tap device, already created, in the pod's network namespace.
	Tap string
	// MAC is the guest's MAC address: the pod interface's, so the guest
	// takes over the pod's identity on the network.
	MAC string
	// MTU is the pod interface's MTU; 0 leaves QEMU's default.
	MTU uint
}

// step is one device area of the domain.
type step struct {
	name  string
	apply func(*libvirtxml.Domain) error
}

// steps is the one place that says which step runs when. Later steps may
// rely on earlier ones (boot decides whether the root disk boots; disks come
// before cloud-init so the seed disk is not the first one).
func steps(s vmspec.Spec, h host.Host, accel host.Accel, p Paths) []step {
	boot := resolveBoot(s.Boot.Source, p)
	return []step{
		{"identity", func(d *libvirtxml.Domain) error { return identity(d, s.Name) }},
		{"accel and machine", func(d *libvirtxml.Domain) error { return accelMachine(d, accel, s.Machine, h) }},
		{"emulator", func(d *libvirtxml.Domain) error { return emulator(d, p.Emulator, p.EmulatorEnv) }},
		{"cpu", func(d *libvirtxml.Domain) error { return cpu(d, s.CPU, s.VCPUs, s.MaxVCPUs, accel, h) }},
		{"memory", func(d *libvirtxml.Domain) error { return memory(d, s.MemoryBytes) }},
		{"firmware", func(d *libvirtxml.Domain) error { return firmware(d, s.Firmware, boot, h.Firmware, p.NVRAM) }},
		{"boot", func(d *libvirtxml.Domain) error { return bootSource(d, boot, s.Boot.Cmdline, s.Console, p) }},
		{"hotplug room", func(d *libvirtxml.Domain) error {
			return hotplugRoom(d, s.VCPUs, accel, s.HotplugMemoryBytes(), s.DIMMBytes())
		}},
		{"disks", func(d *libvirtxml.Domain) error {
			return disks(d, s.DiskBus, boot, p.RootDisk, p.BaseDisk, p.BaseFormat, s.Volumes, p.Volumes)
		}},
		{"filesystems", func(d *libvirtxml.Domain) error { return filesystems(d, s.Shares, p.Shares) }},
		{"cloud-init", func(d *libvirtxml.Domain) error { return cloudInit(d, s.Seeded(), p.CloudInitISO) }},
		{"network", func(d *libvirtxml.Domain) error { return network(d, s.NICs, p.NICs) }},
		{"console", func(d *libvirtxml.Domain) error { return console(d, s.Console, p.Console) }},
		{"guest agent", func(d *libvirtxml.Domain) error { return guestAgent(d, p.GuestAgent) }},
		{"clock", func(d *libvirtxml.Domain) error { return clock(d, accel) }},
		{"features", func(d *libvirtxml.Domain) error { return features(d) }},
		{"devices", func(d *libvirtxml.Domain) error { return platformDevices(d) }},
		{"lifecycle", func(d *libvirtxml.Domain) error { return lifecycle(d) }},
		{"crash", func(d *libvirtxml.Domain) error { return crash(d) }},
	}
}

// Domain converts a pod's VM for one node. Errors name the annotation or
// field at fault: an invalid Spec is InvalidArgument, a Spec this node
// cannot run is FailedPrecondition, and Paths missing what the Spec needs
// (a runtime bug) is Internal.
func Domain(s vmspec.Spec, h host.Host, p Paths) (*libvirtxml.Domain, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	accel, err := resolveAccel(s.Accel, h)
	if err != nil {
		return nil, err
	}
	d := &libvirtxml.Domain{}
	for _, st := range steps(s, h, accel, p) {
		if err := st.apply(d); err != nil {
			return nil, fmt.Errorf("convert %s: %w", st.name, err)
		}
	}
	return d, nil
}

func identity(d *libvirtxml.Domain, name string) error {
	d.Name = name
	return nil
}

func devices(d *libvirtxml.Domain) *libvirtxml.DomainDeviceList {
	if d.Devices == nil {
		d.Devices = &libvirtxml.DomainDeviceList{}
	}
	return d.Devices
}

func domainOS(d *libvirtxml.Domain) *libvirtxml.DomainOS {
	if d.OS == nil {
		d.OS = &libvirtxml.DomainOS{}
	}
	return d.OS
}
