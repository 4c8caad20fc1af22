package vmspec

import (
	"fmt"
	"math"
	"math/bits"

	"github.com/containerd/errdefs"
)

// Overhead is what a VM costs a node beyond its guest RAM: the QEMU process
// (device emulation, TCG's translation cache, page tables, per-vCPU thread
// stacks) and the pod's vmpod shim. The model is
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
// 2.34 MiB per GiB + 0.28 MiB per vCPU, worst residual 1.4 MiB.
//
//   - Fixed: 56.2 + 1.4 (the residual) + 8 for the shim (7.7 MiB PSS per
//     pod with 10 pods, BenchmarkShimFootprint, 2026-12-03) = 65.6,
//     rounded up: 66 MiB (measured with the shim of the step before the
//     node daemon, which ran libvirt in a helper on demand; the shim has
//     only lost code since). libvirt is the node daemon's, in a cgroup of
//     its own, not the pod's.
//   - Per GiB: QEMU's page tables for guest RAM, 2.34 measured (2 MiB per
//     GiB with or without transparent huge pages: the kernel deposits a
//     page table page per huge page), plus TCG's per-page bookkeeping,
//     which a booting guest does not show: a 16-byte PageDesc for every
//     guest page in each 4 MiB region that ever held translated code, 4
//     MiB per GiB once code has run from all of guest RAM. 6.34 rounded
//     up: 7 MiB.
//   - Per vCPU: 0.28 measured (thread, arena, stack, soft TLB after the
//     guest swept all of its RAM), rounded up: 1 MiB.
//
// BenchmarkDensity checks it against 20 VM pods on one node, before and
// after each guest wrote to its RAM (docs/overhead.md).
//
// KVM cannot be measured on these machines (no /dev/kvm), so its model is
// derived from TCG's: no translation buffer (-32 MiB fixed) and no TCG
// bookkeeping (-4 MiB per GiB), and per GiB KVM's EPT/NPT tables on top of
// the host's page tables, which the memory cgroup also charges (+2 MiB per
// GiB). Re-measure on a KVM node.
var (
	OverheadTCG = Overhead{FixedBytes: 66 << 20, PerGuestGiBBytes: 7 << 20, PerVCPUBytes: 1 << 20}
	OverheadKVM = Overhead{FixedBytes: 34 << 20, PerGuestGiBBytes: 5 << 20, PerVCPUBytes: 1 << 20}
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
// overhead is more does not start (CheckPodLimit). A single podFixed
// cannot follow the VM's size, so each RuntimeClass vmpod ships covers
// the VMs up to a size, its envelope, and reserves their largest
// overhead; a cluster with larger VMs adds a RuntimeClass whose podFixed is
// PodFixedFor their size.
type Envelope struct {
	// RuntimeClass is the name of the RuntimeClass (manifests/).
	RuntimeClass string
	// MaxGuestBytes and MaxVCPUs are the largest VM it covers.
	MaxGuestBytes uint64
	MaxVCPUs      int
}

// PodFixedBytes is the envelope's overhead.podFixed memory.
func (e Envelope) PodFixedBytes() uint64 { return PodFixedFor(e.MaxGuestBytes, e.MaxVCPUs) }

// The RuntimeClasses vmpod ships (manifests/runtimeclass.yaml,
// manifests/runtimeclass-small.yaml), one handler, vmpod. The small one
// reserves what a small VM costs, not what an 8 GiB one does: 20 small VM
// pods on a node then use what they reserve, within 10% (docs/overhead.md).
var (
	EnvelopeDefault = Envelope{RuntimeClass: "vmpod", MaxGuestBytes: 8 << 30, MaxVCPUs: 8}
	EnvelopeSmall   = Envelope{RuntimeClass: "vmpod-small", MaxGuestBytes: 512 << 20, MaxVCPUs: 2}
	Envelopes       = []Envelope{EnvelopeDefault, EnvelopeSmall}
)

// RuntimeClassNames are the names of the RuntimeClasses vmpod ships, one
// per envelope.
func RuntimeClassNames() []string {
	names := make([]string, 0, len(Envelopes))
	for _, e := range Envelopes {
		names = append(names, e.RuntimeClass)
	}
	return names
}

// RecommendedPodFixedBytes is the overhead.podFixed memory of the vmpod
// RuntimeClass: EnvelopeDefault's.
func RecommendedPodFixedBytes() uint64 { return EnvelopeDefault.PodFixedBytes() }

// PodFixedFor is the smallest overhead.podFixed memory, in whole 4 MiB,
// that holds the overhead of every VM up to that much guest RAM and that
// many vCPUs, under TCG or KVM.
func PodFixedFor(maxGuestMemoryBytes uint64, maxVCPUs int) uint64 {
	b := max(OverheadTCG.Bytes(maxGuestMemoryBytes, maxVCPUs), OverheadKVM.Bytes(maxGuestMemoryBytes, maxVCPUs))
	return addSat(b, 4<<20-1) &^ (4<<20 - 1)
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
