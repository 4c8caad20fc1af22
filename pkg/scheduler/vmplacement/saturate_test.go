package vmplacement

import (
	"math"
	"testing"
)

func TestSaturatingArithmetic(t *testing.T) {
	const maxI, minI = math.MaxInt64, math.MinInt64
	for _, tc := range []struct {
		name      string
		got, want int64
	}{
		{"add", addSat(2, 3), 5},
		{"add wraps up", addSat(maxI, 1), maxI},
		{"add two max", addSat(maxI, maxI), maxI},
		{"add 8Ei twice", addSat(8<<60-1, 8<<60-1), maxI},
		{"add wraps down", addSat(minI, -1), minI},
		{"add mixed signs", addSat(maxI, minI), -1},
		{"sub", subSat(5, 3), 2},
		{"sub wraps up", subSat(maxI, -1), maxI},
		{"sub min from 0", subSat(0, minI), maxI},
		{"sub min from -1", subSat(-1, minI), maxI},
		{"sub wraps down", subSat(minI, 1), minI},
		{"sub max from small", subSat(16<<30, maxI), 16<<30 - maxI},
		{"int64 of max uint64", int64Sat(math.MaxUint64), maxI},
		{"int64 of 2^63", int64Sat(1 << 63), maxI},
		{"int64 of 1Ti", int64Sat(1 << 40), 1 << 40},
		{"requested wrapped", requestedSat(-2), maxI},
		{"requested", requestedSat(16 << 30), 16 << 30},
		{"share of max", scaleShare(100, maxI, maxI), 100},
		{"share half of max", scaleShare(100, maxI/2, maxI), 49},
		{"share of 4Ei allocatable", scaleShare(100, 2<<60, 4<<60), 50},
		{"share small", scaleShare(100, 1, 3), 33},
		{"share none", scaleShare(100, 0, maxI), 0},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: got %d, want %d", tc.name, tc.got, tc.want)
		}
	}
}

// TestFootprintSaturates: no guest size or vCPU count makes a VM's
// footprint wrap to a small or negative number.
func TestFootprintSaturates(t *testing.T) {
	for _, guest := range []int64{math.MaxInt64, 4 << 60, 1 << 62} {
		for _, kvm := range []bool{false, true} {
			if got := vmFootprint(guest, math.MaxInt32, math.MaxInt32, kvm); got < guest {
				t.Errorf("vmFootprint(%d, MaxInt32, MaxInt32, kvm=%v) = %d, below the guest RAM", guest, kvm, got)
			}
		}
	}
}
