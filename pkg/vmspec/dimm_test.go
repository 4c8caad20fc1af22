package vmspec_test

import (
	"testing"

	"github.com/vmpod/vmpod/pkg/vmspec"
)

// TestDIMMBytes: DIMMs are 128 MiB, the guest's memory block, until the
// room would need more than MaxDIMMs of them; then the least multiple of
// 128 MiB that fits. A VM without room, or with virtio-mem, has none.
func TestDIMMBytes(t *testing.T) {
	for _, tc := range []struct {
		name     string
		mem, max uint64
		hotplug  vmspec.MemoryHotplug
		bytes    uint64
		slots    int
	}{
		{"256Mi to 512Mi", 256 << 20, 512 << 20, vmspec.MemoryHotplugDIMM, 128 << 20, 2},
		{"32 DIMMs of 128Mi", 1 << 30, 5 << 30, vmspec.MemoryHotplugDIMM, 128 << 20, 32},
		{"one more block takes 256Mi DIMMs", 1 << 30, 5<<30 + 256<<20, vmspec.MemoryHotplugDIMM, 256 << 20, 17},
		{"64Gi of room", 1 << 30, 65 << 30, vmspec.MemoryHotplugDIMM, 2 << 30, 32},
		{"no room", 256 << 20, 0, vmspec.MemoryHotplugDIMM, 0, 0},
		{"virtio-mem", 256 << 20, 512 << 20, vmspec.MemoryHotplugVirtioMem, 0, 0},
		{"default", 256 << 20, 512 << 20, "", 0, 0},
	} {
		s := vmspec.Spec{MemoryBytes: tc.mem, MaxMemoryBytes: tc.max, MemoryHotplug: tc.hotplug}
		if b, n := s.DIMMBytes(), s.DIMMSlots(); b != tc.bytes || n != tc.slots {
			t.Errorf("%s: %d DIMMs of %d MiB, want %d of %d MiB", tc.name, n, b>>20, tc.slots, tc.bytes>>20)
		}
	}
}
