package host

// Accel is a hardware or software accelerator as libvirt names the domain
// type: "kvm" or "qemu" (TCG).
type Accel string

const (
	AccelKVM Accel = "kvm"
	AccelTCG Accel = "qemu"
)

// Host is what one node can run, read from libvirt's capabilities and
// domain capabilities. It is plain data: the converter and the scheduler
// plugin compare a vmspec.Spec against it without calling libvirt.
type Host struct {
	// Arch is the host architecture as libvirt reports it, e.g. "x86_64".
	Arch string
	// Emulator is the QEMU binary for Arch, e.g. "/usr/bin/qemu-system-x86_64".
	Emulator string
	// Accels lists the usable accelerators, best first (kvm before qemu).
	Accels []Accel
	// KVMReason says why kvm is not in Accels when the node was probed
	// and KVM failed there (WithoutKVM); "" otherwise.
	KVMReason string
	// Machines lists the machine types QEMU offers for Arch, canonical names
	// and their aliases (e.g. "pc-q35-7.2" and "q35").
	Machines []string
	// MaxVCPUs is the largest vCPU count the best accelerator allows for the
	// default machine type; 0 when libvirt does not say.
	MaxVCPUs int
	// CPU describes the host CPU as libvirt's capabilities report it: the
	// model libvirt decodes from the host's CPUID, and its features.
	CPU CPU
	// HostModel is what a guest with mode='host-model' gets under the best
	// accelerator: a named model plus the features it adds on top. Zero
	// (Model "") when host-model is not usable or domain capabilities were
	// not given. Under TCG it can differ a lot from CPU.
	HostModel CPU
	// CPUModels lists the named CPU models usable with the best accelerator,
	// sorted; empty without domain capabilities.
	CPUModels []string
	// HostPassthrough reports whether mode='host-passthrough' is usable
	// (it needs KVM).
	HostPassthrough bool
	// Firmware lists firmware images found on the host.
	Firmware Firmware
	// MemoryBytes is the host's physical memory, summed over its NUMA cells;
	// 0 when libvirt reports no cells.
	MemoryBytes uint64
	// CPUs is the host's logical CPUs, summed over its NUMA cells; 0 when
	// libvirt reports no cells. A VM's default room to grow in vCPUs
	// stops at it (pkg/convert DefaultRoom).
	CPUs int
}

// CPU is the host CPU model and the features it has.
type CPU struct {
	Vendor   string
	Model    string
	Features []string
}

// Firmware is the set of firmware images QEMU can load on this host.
// Without WithFiles, Parse fills only what libvirt reports (the paths are
// not checked and QBoot stays "").
type Firmware struct {
	// UEFICode is the read-only OVMF code image, "" when absent.
	UEFICode string
	// UEFIVars is the NVRAM template that goes with UEFICode.
	UEFIVars string
	// UEFIAuto reports that libvirt can pick UEFI code and vars itself from
	// its firmware descriptors (<os firmware='efi'>).
	UEFIAuto bool
	// QBoot is the qboot ROM, a fast BIOS for direct kernel boot, "" when absent.
	QBoot string
}

// HasAccel reports whether a is usable on this host.
func (h Host) HasAccel(a Accel) bool {
	for _, x := range h.Accels {
		if x == a {
			return true
		}
	}
	return false
}
