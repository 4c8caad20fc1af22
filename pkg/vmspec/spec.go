package vmspec

// Spec is the VM one pod asks for. The zero value is not valid; build it with
// FromPod or FromOCI, which fill every default, then Validate.
type Spec struct {
	// Name is the libvirt domain name: "<namespace>_<pod name>".
	Name string
	// Image is the containerdisk image reference, for image locality.
	Image string

	// VCPUs is the vCPU count: resources.limits.cpu rounded up (default 1).
	VCPUs int
	// MemoryBytes is the guest RAM: resources.limits.memory rounded down to
	// whole MiB. The VM's own overhead is accounted separately (pkg/overhead).
	MemoryBytes uint64
	// MaxVCPUs and MaxMemoryBytes are how far an in-place resize may grow
	// the running VM (vmpod.io/max-vcpus, vmpod.io/max-memory): the domain
	// is made with room for them when it is created. 0 means no room: the
	// VM keeps the size it started with. CeilingVCPUs and
	// CeilingMemoryBytes give the effective maxima.
	MaxVCPUs       int
	MaxMemoryBytes uint64
	// MemoryHotplug is how RAM up to MaxMemoryBytes is added live
	// (vmpod.io/memory-hotplug); "" is the default, virtio-mem, so that a
	// Spec recorded before the annotation existed means what it meant.
	MemoryHotplug MemoryHotplug

	Accel    Accel
	CPU      CPU
	Firmware Firmware
	// Machine is the QEMU machine type, e.g. "q35" or "pc-q35-7.2".
	Machine string
	Boot    Boot
	// DiskBus is the bus of every disk: the image's and the volumes'.
	DiskBus DiskBus
	// Volumes are the pod's block volumes (volumeDevices), in pod order.
	Volumes []Volume
	// Shares are the pod's filesystem volumes the guest mounts from
	// virtio-fs shares, in the order of their mount paths (SortShares).
	Shares []Share
	// CloudInit is nil when the pod asks for no cloud-init data.
	CloudInit *CloudInit
	// NICs are the guest's network interfaces; one, joined to the pod
	// network, unless vmpod.io/network is "none".
	NICs []NIC
	// Console connects the guest's serial console to the container's
	// stdio (kubectl logs, kubectl attach).
	Console bool
}

// CeilingVCPUs is the most vCPUs the VM can have while it runs: its
// maximum, or its vCPUs when it has none.
func (s Spec) CeilingVCPUs() int { return max(s.MaxVCPUs, s.VCPUs) }

// CeilingMemoryBytes is the most guest RAM the VM can have while it runs:
// its maximum, or its memory when it has none.
func (s Spec) CeilingMemoryBytes() uint64 { return max(s.MaxMemoryBytes, s.MemoryBytes) }

// HotplugMemoryBytes is the guest RAM the VM can gain while it runs, in
// one virtio-mem device or in DIMMs (MemoryHotplug); 0 when it cannot.
func (s Spec) HotplugMemoryBytes() uint64 { return s.CeilingMemoryBytes() - s.MemoryBytes }

// MemoryBlockBytes is the granularity of live memory changes through
// virtio-mem: its block (2 MiB, the x86 huge page), so a resize changes
// the guest's RAM by a multiple of it.
const MemoryBlockBytes = 2 << 20

// MemoryHotplug is the device that adds RAM to a running guest.
type MemoryHotplug string

const (
	// MemoryHotplugVirtioMem is one virtio-mem device the guest plugs
	// and unplugs 2 MiB blocks of; the guest needs the virtio_mem driver.
	MemoryHotplugVirtioMem MemoryHotplug = "virtio-mem"
	// MemoryHotplugDIMM is ACPI memory hotplug: one pc-dimm per step,
	// which any Linux with CONFIG_ACPI_HOTPLUG_MEMORY takes, for guests
	// without virtio_mem. A DIMM goes only when the guest ejects all of it.
	MemoryHotplugDIMM MemoryHotplug = "dimm"
)

const (
	// DIMMBlockBytes is what a DIMM's size is a multiple of: Linux onlines
	// and offlines memory in memory blocks of 128 MiB on x86, so a DIMM
	// of another size leaves a block that is never whole and cannot go.
	DIMMBlockBytes = 128 << 20
	// MaxDIMMs bounds the DIMM slots of a VM (libvirt and ACPI allow 256):
	// each slot is an ACPI device the firmware describes and the guest
	// scans, so a large room gets larger DIMMs rather than more of them.
	MaxDIMMs = 32
)

// DIMMs reports whether the VM grows its RAM live in DIMMs.
func (s Spec) DIMMs() bool {
	return s.MemoryHotplug == MemoryHotplugDIMM && s.HotplugMemoryBytes() > 0
}

// DIMMBytes is the size of each DIMM of a VM that grows in DIMMs, and so
// the step its RAM changes by: the least multiple of DIMMBlockBytes with
// which HotplugMemoryBytes fits in MaxDIMMs slots. 0 for another VM.
func (s Spec) DIMMBytes() uint64 {
	if !s.DIMMs() {
		return 0
	}
	per := uint64(DIMMBlockBytes * MaxDIMMs)
	return DIMMBlockBytes * ((s.HotplugMemoryBytes() + per - 1) / per)
}

// DIMMSlots is how many DIMMs fit in the VM's room: the slots of its
// <maxMemory>. 0 for a VM that does not grow in DIMMs.
func (s Spec) DIMMSlots() int {
	if b := s.DIMMBytes(); b > 0 {
		return int(s.HotplugMemoryBytes() / b)
	}
	return 0
}

// Accel is the accelerator policy.
type Accel string

const (
	// AccelAuto uses KVM where the node has it and TCG elsewhere.
	AccelAuto Accel = "auto"
	// AccelKVM requires KVM: the pod fails rather than run emulated.
	AccelKVM Accel = "kvm"
	// AccelTCG always emulates, even where KVM exists.
	AccelTCG Accel = "tcg"
)

// CPU is the guest CPU model and the host CPU features it requires.
type CPU struct {
	// Model is CPUModelAuto, CPUModelHostPassthrough, CPUModelHostModel or
	// a named libvirt CPU model such as "Skylake-Client".
	Model string
	// Features the guest CPU must have (libvirt names, e.g. "avx2").
	Features []string
	// Nested offers the guest the CPU's virtualisation extensions (vmx,
	// svm), so it can run VMs of its own; off, they are disabled.
	Nested bool
}

// NestedFeatures are the CPU features that let a guest run VMs of its
// own: Intel's VMX and AMD's SVM, in libvirt's names.
var NestedFeatures = []string{"svm", "vmx"}

const (
	// CPUModelAuto is host-passthrough under KVM and QEMU's default model
	// under TCG, where passthrough is impossible.
	CPUModelAuto            = "auto"
	CPUModelHostPassthrough = "host-passthrough"
	CPUModelHostModel       = "host-model"
)

// Firmware is the guest firmware.
type Firmware string

const (
	FirmwareBIOS Firmware = "bios"
	FirmwareUEFI Firmware = "uefi"
)

// Boot says where the guest boots from.
type Boot struct {
	Source BootSource
	// Cmdline is appended to the kernel command line on direct kernel boot.
	Cmdline string
}

// BootSource picks direct kernel boot or disk boot.
type BootSource string

const (
	// BootAuto boots the image's kernel when it ships one (/boot/vmlinuz
	// or /boot/vmlinux), else its disk.
	BootAuto   BootSource = "auto"
	BootKernel BootSource = "kernel"
	BootDisk   BootSource = "disk"
)

// DiskBus is the bus disks are attached to.
type DiskBus string

const (
	DiskBusVirtio DiskBus = "virtio"
	DiskBusSATA   DiskBus = "sata"
	DiskBusSCSI   DiskBus = "scsi"
)

// Volume is a block volume of the pod that the guest sees as a disk.
type Volume struct {
	// Name identifies the volume in the VM: the key of convert.Paths.Volumes
	// and the file name of its device node in the VM's state dir. It is
	// made from DevicePath alone, because the CRI does not pass volume
	// names: "data" for /dev/data, else a short name with a hash of the
	// path (see volumeID). FromPod and FromOCI give the same.
	Name string
	// DevicePath is where the pod asked for the device (volumeDevices[].devicePath).
	DevicePath string
	// Serial is the disk serial the guest sees (/dev/disk/by-id/*-<serial>):
	// the same as Name, at most MaxSerialLen characters.
	Serial string
}

// CloudInit is the NoCloud data the guest gets on a config-drive ISO.
type CloudInit struct {
	UserData      string
	NetworkConfig string
	// SSHKeys go into the NoCloud meta-data as public-keys.
	SSHKeys []string
	// Volume names a ConfigMap or Secret volume of the pod whose files
	// user-data, meta-data and network-config are the source, instead of
	// the inline annotations.
	Volume string
	// VolumeMountPath is where that volume is mounted in the container.
	VolumeMountPath string
}

// NIC is one guest network interface.
type NIC struct {
	// Name is the pod-side interface whose address the guest takes ("eth0").
	Name string
}

// MaxSerialLen is the longest disk serial virtio-blk passes to the guest.
const MaxSerialLen = 20
