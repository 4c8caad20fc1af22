package vmspec

// Overhead is what a VM costs a node beyond its guest RAM: the QEMU process
// (device emulation, TCG's translation cache, page tables, per-vCPU thread
// stacks) and the pod's vmpod shim with its embedded libvirt. The model is
// linear in guest RAM and vCPUs, per accelerator; hack/measure-overhead.sh
// measures real QEMU processes and prints the table its constants come from
// (see docs/overhead.md).
type Overhead struct {
	// FixedBytes is paid once per VM.
	FixedBytes uint64
	// PerGuestGiBBytes grows with guest RAM (page tables, dirty bitmaps).
	PerGuestGiBBytes uint64
	// PerVCPUBytes grows with the vCPU count.
	PerVCPUBytes uint64
}

// Overhead models. Initial values from the measurements in DESIGN.md
// (TCG: 256 MiB guest at 327 MiB RSS, 1 GiB guest at 723 MiB after touching
// 600 MiB; tb-size 32 MiB saves 14 MiB); recalibrated by
// hack/measure-overhead.sh.
var (
	OverheadTCG = Overhead{FixedBytes: 80 << 20, PerGuestGiBBytes: 24 << 20, PerVCPUBytes: 8 << 20}
	OverheadKVM = Overhead{FixedBytes: 48 << 20, PerGuestGiBBytes: 12 << 20, PerVCPUBytes: 4 << 20}
)

// OverheadFor returns the overhead model of an accelerator: kvm true for KVM.
func OverheadFor(kvm bool) Overhead {
	if kvm {
		return OverheadKVM
	}
	return OverheadTCG
}

// Bytes is the overhead of a VM with that much guest RAM and that many vCPUs,
// rounded up to whole MiB.
func (o Overhead) Bytes(guestMemoryBytes uint64, vcpus int) uint64 {
	perGiB := (guestMemoryBytes*o.PerGuestGiBBytes + (1<<30 - 1)) >> 30
	b := o.FixedBytes + perGiB + uint64(max(vcpus, 0))*o.PerVCPUBytes
	return (b + (1<<20 - 1)) &^ (1<<20 - 1)
}
