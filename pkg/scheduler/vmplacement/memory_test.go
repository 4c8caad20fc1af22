package vmplacement

import (
	"testing"

	"github.com/vmpod/vmpod/pkg/vmspec"
)

// TestFootprintCountsShares: a VM's virtio-fs shares add vmspec's shares'
// part to its footprint under either accelerator, for its pod cgroup
// holds their file servers; a VM without shares costs the model alone.
func TestFootprintCountsShares(t *testing.T) {
	const guest = int64(1) << 30
	for _, kvm := range []bool{false, true} {
		alone := guest + int64(vmspec.OverheadFor(kvm).Bytes(uint64(guest), 1))
		if got := vmFootprint(guest, 1, 0, kvm); got != alone {
			t.Errorf("kvm=%v: footprint without shares %d MiB, want guest RAM + overhead, %d MiB", kvm, got>>20, alone>>20)
		}
		want := alone + int64(vmspec.SharesOverheadBytes(uint64(guest), 3))
		if got := vmFootprint(guest, 1, 3, kvm); got != want || got <= alone {
			t.Errorf("kvm=%v: footprint with 3 shares %d MiB, want %d MiB", kvm, got>>20, want>>20)
		}
	}
}
