package vmspec

import (
	"fmt"
	"math"
	"math/bits"

	"github.com/containerd/errdefs"
)

// Overhead is what a VM costs a node beyond its guest RAM: the QEMU process
// (device emulation, TCG's translation cache, page tables, per-vCPU thread
// stacks) and the pod's vmpod shim. The model is linear in guest RAM and
// vCPUs, per accelerator (a VM's virtio-fs shares add SharesOverheadBytes);
// hack/measure-overhead.sh measures real QEMU processes and prints the
// table its constants come from (see docs/overhead.md).
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

// What a VM's virtio-fs shares (its pod's filesystem volumes, Spec.Shares)
// cost its pod beyond Bytes. Each share has a file server (QEMU 7.2's
// virtiofsd: a parent that waits and a child that serves) in the file
// servers' cgroup beside QEMU's, under the pod's, and a vhost-user-fs
// device in QEMU; and a VM with shares has its guest RAM in a shared
// memfd, which the servers map, where one without has private anonymous
// memory. Page cache is left out, as in the VM's model: the kernel
// reclaims it at the pod's limit. docs/overhead.md has the table.
//
// Measured with BenchmarkShareMemory (pkg/vm) on 2026-12-05 (QEMU 7.2,
// cgroup v1, kernel 6.18, 2-core machine beside other tests; the test
// guest, 1 GiB, 1 vCPU, all of its RAM touched at boot; and 256 MiB
// guests; 0, 1 and 4 shares on ext4; the guest read a file in each share
// and wrote 1 MiB to it through the agent; 5 runs):
//
//   - The file servers' cgroup: 2.0-2.4 MiB per share, of which 1.0-1.35
//     MiB is not page cache (0.5 of it kernel memory); 3.3-3.4 MiB not
//     page cache once the guest had looked up 1,000 more files in the
//     share (about 2.1 KiB each: the server holds an inode and an O_PATH
//     fd for every file the guest knows) and written from 8 processes at
//     once. Their PSS: 1.6-2.6 MiB per share, 0.7-0.8 of it guest RAM
//     they map, which is QEMU's cgroup's.
//   - QEMU's cgroup: 0.5 MiB more anonymous memory per share (the
//     device), within the 2 MiB that QEMU's own memory varies from run
//     to run; and 2.4-2.5 MiB more kernel memory per GiB of guest RAM
//     with its RAM in the memfd (the memfd's page cache tree, one node per
//     64 pages; page tables are the same as anonymous memory's).
//
// OverheadPerShareBytes: 1.35 (the server) + 0.5 (the device) = 1.85
// MiB, rounded up to 4 MiB: room for about 1,000 files the guest has
// looked up in the share (3.4 + 0.5 = 3.9 MiB measured with them). A
// share whose guest walks more files costs about 2 KiB more for each.
// OverheadSharedRAMPerGiBBytes: 2.5 rounded up, 3 MiB per GiB.
var (
	OverheadPerShareBytes        uint64 = 4 << 20
	OverheadSharedRAMPerGiBBytes uint64 = 3 << 20
)

// OverheadFor returns the overhead model of an accelerator: kvm true for KVM.
func OverheadFor(kvm bool) Overhead {
	if kvm {
		return OverheadKVM
	}
	return OverheadTCG
}

// Bytes is the overhead of a VM with that much guest RAM and that many vCPUs,
// rounded up to whole MiB: QEMU's and the shim's, without what the VM's
// shares add (SharesOverheadBytes; PodBytes is both).
// It never wraps: for sizes no Spec passes Validate with, it saturates.
func (o Overhead) Bytes(guestMemoryBytes uint64, vcpus int) uint64 {
	b := addSat(addSat(o.FixedBytes, perGuestGiB(guestMemoryBytes, o.PerGuestGiBBytes)), mulSat(uint64(max(vcpus, 0)), o.PerVCPUBytes))
	return roundMiB(b)
}

// PodBytes is the overhead a VM's pod must hold beyond its guest RAM: the
// VM's (Bytes) and its shares' (SharesOverheadBytes).
func (o Overhead) PodBytes(guestMemoryBytes uint64, vcpus, shares int) uint64 {
	return addSat(o.Bytes(guestMemoryBytes, vcpus), SharesOverheadBytes(guestMemoryBytes, shares))
}

// SharesOverheadBytes is what a VM's virtio-fs shares add to its pod's
// overhead, rounded up to whole MiB: OverheadPerShareBytes for each, and
// OverheadSharedRAMPerGiBBytes for its guest RAM once it has one (its RAM
// is then a shared memfd). 0 without shares; the same under TCG and KVM.
func SharesOverheadBytes(guestMemoryBytes uint64, shares int) uint64 {
	if shares <= 0 {
		return 0
	}
	b := addSat(mulSat(uint64(shares), OverheadPerShareBytes), perGuestGiB(guestMemoryBytes, OverheadSharedRAMPerGiBBytes))
	return roundMiB(b)
}

// perGuestGiB is guest * perGiB / 1 GiB, rounded up, without the 64-bit
// product; it saturates.
func perGuestGiB(guestMemoryBytes, perGiB uint64) uint64 {
	hi, lo := bits.Mul64(guestMemoryBytes, perGiB)
	lo, carry := bits.Add64(lo, 1<<30-1, 0)
	hi += carry
	if hi>>30 != 0 {
		return math.MaxUint64
	}
	return hi<<34 | lo>>30
}

// roundMiB rounds b up to whole MiB, saturating at the largest.
func roundMiB(b uint64) uint64 {
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
// guest RAM, so podFixed must hold the VM's whole overhead, its shares'
// included (PodBytes): a VM whose overhead is more does not start
// (CheckPodLimit). A single podFixed cannot follow the VM's size, so each
// RuntimeClass vmpod ships covers the VMs up to a size, its envelope, and
// reserves their largest overhead; a cluster with larger VMs, or more
// shares, adds a RuntimeClass whose podFixed is PodFixedFor their size.
type Envelope struct {
	// RuntimeClass is the name of the RuntimeClass (manifests/).
	RuntimeClass string
	// MaxGuestBytes, MaxVCPUs and MaxShares are the largest VM it covers.
	MaxGuestBytes uint64
	MaxVCPUs      int
	MaxShares     int
}

// PodFixedBytes is the envelope's overhead.podFixed memory.
func (e Envelope) PodFixedBytes() uint64 {
	return PodFixedFor(e.MaxGuestBytes, e.MaxVCPUs, e.MaxShares)
}

// The RuntimeClasses vmpod ships (manifests/runtimeclass.yaml,
// manifests/runtimeclass-small.yaml), one handler, vmpod. The small one
// reserves what a small VM costs, not what an 8 GiB one does: 20 small VM
// pods on a node used what they reserved, within 10%, before the class
// reserved for shares; without shares, 12% under it (docs/overhead.md).
//
// Shares: nearly every pod has one, its service account token (a
// projected volume), and most a ConfigMap or Secret besides. The small
// class covers those two (10 MiB of its podFixed: 4 MiB each and 3 MiB
// per GiB of 512 MiB, rounded up); the default class covers 8, half of MaxShares,
// which is 56 MiB of its podFixed at 8 GiB (24 of it the shared guest
// RAM's). A VM smaller than its class's envelope has room for more: the
// runtime checks the VM's own need (CheckPodLimit).
var (
	EnvelopeDefault = Envelope{RuntimeClass: "vmpod", MaxGuestBytes: 8 << 30, MaxVCPUs: 8, MaxShares: 8}
	EnvelopeSmall   = Envelope{RuntimeClass: "vmpod-small", MaxGuestBytes: 512 << 20, MaxVCPUs: 2, MaxShares: 2}
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
// that holds the overhead of every VM up to that much guest RAM, that
// many vCPUs and that many shares, under TCG or KVM.
func PodFixedFor(maxGuestMemoryBytes uint64, maxVCPUs, maxShares int) uint64 {
	b := max(OverheadTCG.PodBytes(maxGuestMemoryBytes, maxVCPUs, maxShares),
		OverheadKVM.PodBytes(maxGuestMemoryBytes, maxVCPUs, maxShares))
	return addSat(b, 4<<20-1) &^ (4<<20 - 1)
}

// CheckPodLimit refuses a VM that its pod's memory limit (the pod cgroup's:
// the container's limit, which is the guest RAM, plus the RuntimeClass's
// overhead.podFixed) cannot hold with its overhead and its shares'
// (PodBytes). A limit of 0 is none. The error is FailedPrecondition and
// says what podFixed the VM needs.
func (o Overhead) CheckPodLimit(podLimitBytes, guestMemoryBytes uint64, vcpus, shares int) error {
	over := o.Bytes(guestMemoryBytes, vcpus)
	sh := SharesOverheadBytes(guestMemoryBytes, shares)
	need := addSat(addSat(guestMemoryBytes, over), sh)
	if podLimitBytes == 0 || podLimitBytes >= need {
		return nil
	}
	sharesPart := ""
	if sh > 0 {
		sharesPart = fmt.Sprintf(" + %d MiB for its %d virtio-fs shares", sh>>20, shares)
	}
	return fmt.Errorf("pod memory limit %d MiB cannot hold the VM: %d MiB guest RAM + %d MiB overhead (%d vCPUs)%s = %d MiB; "+
		"the RuntimeClass's overhead.podFixed memory must be at least %d MiB for this VM (docs/overhead.md): %w",
		podLimitBytes>>20, guestMemoryBytes>>20, over>>20, vcpus, sharesPart, need>>20, (over+sh)>>20, errdefs.ErrFailedPrecondition)
}
