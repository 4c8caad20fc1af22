package vmspec

import (
	"fmt"
	"math"
	"math/bits"

	"github.com/containerd/errdefs"
)

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

// Overhead models, worst case: the memory the kernel cannot reclaim
// (anonymous memory, page tables) with the guest having touched all of its
// RAM. Page cache QEMU maps (its binary, the guest kernel image) is not in
// it: the kernel reclaims that before it OOM-kills. docs/overhead.md has
// the measured table.
//
// TCG: QEMU's part measured with hack/measure-overhead.sh on 2026-12-02
// (QEMU 7.2, libvirt 9.0, the Debian 6.1 test guest with a virtio NIC,
// 128 MiB to 2 GiB, 1 and 2 vCPUs, tb-cache 32 MiB, guest RAM fully
// touched): QEMU holds 56-61 MiB beyond guest RAM (32 MiB of it the
// translation buffer, already full after boot); least squares 56.2 MiB +
// 2.34 MiB per GiB + 0.28 MiB per vCPU, worst residual 1.4 MiB. The shim's
// part is the real shim's: 13.8 MiB PSS per pod with 10 pods
// (BenchmarkShimFootprint), 12.0 with 20 (BenchmarkDensity), taken as
// 14 MiB. (Until 2026-12-03 it was the measuring process's own 57.3 MiB,
// a stand-in from before the shim was a binary of its own.)
// FixedBytes = (56.2 + 1.4 + 14) MiB + 10%, rounded up to 4 MiB; the
// slopes rounded up to whole MiB. Per GiB it is QEMU's page tables for
// guest RAM: 2 MiB per GiB with or without transparent huge pages (the
// kernel deposits a page table page per huge page). BenchmarkDensity
// checks it against 20 VM pods on one node: 62 MiB per pod beyond the
// guest RAM QEMU has resident (docs/overhead.md).
//
// KVM cannot be measured on these machines (no /dev/kvm), so its model is
// derived from TCG's: no translation buffer (-32 MiB fixed), and per GiB
// KVM's EPT/NPT tables on top of the host's page tables, which the memory
// cgroup also charges (+2 MiB per GiB). Re-measure on a KVM node.
var (
	OverheadTCG = Overhead{FixedBytes: 80 << 20, PerGuestGiBBytes: 3 << 20, PerVCPUBytes: 1 << 20}
	OverheadKVM = Overhead{FixedBytes: 48 << 20, PerGuestGiBBytes: 5 << 20, PerVCPUBytes: 1 << 20}
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
// It never wraps: for sizes no Spec passes Validate with, it saturates.
func (o Overhead) Bytes(guestMemoryBytes uint64, vcpus int) uint64 {
	// guest * perGiB / 1 GiB, rounded up, without the 64-bit product.
	hi, lo := bits.Mul64(guestMemoryBytes, o.PerGuestGiBBytes)
	lo, carry := bits.Add64(lo, 1<<30-1, 0)
	hi += carry
	if hi>>30 != 0 {
		return math.MaxUint64 &^ (1<<20 - 1)
	}
	perGiB := hi<<34 | lo>>30
	b := addSat(addSat(o.FixedBytes, perGiB), mulSat(uint64(max(vcpus, 0)), o.PerVCPUBytes))
	return addSat(b, 1<<20-1) &^ (1<<20 - 1)
}

func addSat(a, b uint64) uint64 {
	s, c := bits.Add64(a, b, 0)
	if c != 0 {
		return math.MaxUint64
	}
	return s
}

func mulSat(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	if hi != 0 {
		return math.MaxUint64
	}
	return lo
}

// The kubelet limits a pod's memory cgroup to its containers' limits plus
// the RuntimeClass's overhead.podFixed, and the container's limit is the
// guest RAM, so podFixed must hold the VM's whole overhead: a VM whose
// overhead is more does not start (CheckPodLimit). The RuntimeClass vmpod
// ships covers every VM up to this size under either accelerator; larger
// VMs take a RuntimeClass whose podFixed is PodFixedFor their size.
const (
	PodFixedMaxGuestBytes = 8 << 30
	PodFixedMaxVCPUs      = 8
)

// RecommendedPodFixedBytes is the overhead.podFixed memory of the vmpod
// RuntimeClass: PodFixedFor(PodFixedMaxGuestBytes, PodFixedMaxVCPUs).
func RecommendedPodFixedBytes() uint64 {
	return PodFixedFor(PodFixedMaxGuestBytes, PodFixedMaxVCPUs)
}

// PodFixedFor is the smallest overhead.podFixed memory, in whole 16 MiB,
// that holds the overhead of every VM up to that much guest RAM and that
// many vCPUs, under TCG or KVM.
func PodFixedFor(maxGuestMemoryBytes uint64, maxVCPUs int) uint64 {
	b := max(OverheadTCG.Bytes(maxGuestMemoryBytes, maxVCPUs), OverheadKVM.Bytes(maxGuestMemoryBytes, maxVCPUs))
	return (b + (16<<20 - 1)) &^ (16<<20 - 1)
}

// CheckPodLimit refuses a VM that its pod's memory limit (the pod cgroup's:
// the container's limit, which is the guest RAM, plus the RuntimeClass's
// overhead.podFixed) cannot hold with its overhead. A limit of 0 is none.
// The error is FailedPrecondition and says what podFixed the VM needs.
func (o Overhead) CheckPodLimit(podLimitBytes, guestMemoryBytes uint64, vcpus int) error {
	over := o.Bytes(guestMemoryBytes, vcpus)
	need := guestMemoryBytes + over
	if podLimitBytes == 0 || podLimitBytes >= need {
		return nil
	}
	return fmt.Errorf("pod memory limit %d MiB cannot hold the VM: %d MiB guest RAM + %d MiB overhead (%d vCPUs) = %d MiB; "+
		"the RuntimeClass's overhead.podFixed memory must be at least %d MiB for this VM (docs/overhead.md): %w",
		podLimitBytes>>20, guestMemoryBytes>>20, over>>20, vcpus, need>>20, over>>20, errdefs.ErrFailedPrecondition)
}
