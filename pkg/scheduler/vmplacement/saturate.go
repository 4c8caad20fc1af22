package vmplacement

import (
	"math"
	"math/bits"
)

// The memory sums here add int64 byte counts that pod authors choose: the
// requests of every pod on a node (a pod bound with spec.nodeName is
// counted without ever passing a Filter), as the scheduler's NodeInfo adds
// them up, and each VM pod's extra. Plain int64 sums wrap: two pods asking
// for 8Ei would make a node look empty, and a VM pod of ours could look
// like it fits anywhere. These saturate instead, so an absurd pod makes a
// node look full, never empty.

// addSat is a+b, clamped to the int64 range.
func addSat(a, b int64) int64 {
	s := a + b
	switch {
	case a > 0 && b > 0 && s < 0:
		return math.MaxInt64
	case a < 0 && b < 0 && s >= 0:
		return math.MinInt64
	}
	return s
}

// subSat is a-b, clamped to the int64 range.
func subSat(a, b int64) int64 {
	if b == math.MinInt64 {
		if a >= 0 {
			return math.MaxInt64
		}
		return a - b // a + 2^63, in range for a < 0
	}
	return addSat(a, -b)
}

// int64Sat is u as an int64, clamped at math.MaxInt64.
func int64Sat(u uint64) int64 {
	if u > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(u)
}

// requestedSat is a NodeInfo's summed memory requests, made safe to add
// to: the scheduler sums them with plain int64 additions, so a negative
// sum can only be one that wrapped, and it counts as all memory taken.
func requestedSat(requested int64) int64 {
	if requested < 0 {
		return math.MaxInt64
	}
	return requested
}

// scaleShare is scale*part/whole without the 64-bit product overflowing,
// for 0 <= part <= whole and whole > 0.
func scaleShare(scale, part, whole int64) int64 {
	hi, lo := bits.Mul64(uint64(scale), uint64(part))
	q, _ := bits.Div64(hi, lo, uint64(whole)) // hi < whole as part <= whole and scale < 2^63
	return int64(q)
}
