package main

import (
	"fmt"
	"io"
	"math"
	"text/tabwriter"

	"github.com/vmpod/vmpod/pkg/vmspec"
)

// report prints the table and the fitted model.
func report(w io.Writer, rs []result, shimIdle uint64) {
	model := vmspec.OverheadTCG
	fmt.Fprintf(w, "\nModel in pkg/vmspec (OverheadTCG): fixed %d MiB + %d MiB per GiB + %d MiB per vCPU\n\n",
		model.FixedBytes>>20, model.PerGuestGiBBytes>>20, model.PerVCPUBytes>>20)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "guest MiB\tvCPUs\tTHP\tboot s\ttouched\tin THP\tQEMU RSS\tPSS\tanon\tfile\tPTE\tcgroup-cache\tQEMU overhead\tpeak\tTB unfilled\tstand-in RSS\tworst\tmodel\terror\t")
	for _, r := range rs {
		pred := model.Bytes(uint64(r.GuestMiB)<<20, r.VCPUs)
		cg := "-"
		if r.CgroupOK {
			cg = fmt.Sprintf("%.1f", mib(r.CgroupUsage-r.CgroupCache))
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t%.1f\t%.1f\t%.0f\t%.1f\t%.1f\t%.1f\t%.1f\t%.2f\t%s\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%d\t%+.1f\t\n",
			r.GuestMiB, r.VCPUs, onOff(r.THP), r.Boot.Seconds(), mib(r.GuestTouched), mib(r.GuestHuge), mib(r.RSS), mib(r.PSS),
			mib(r.Anon), mib(r.File), mib(r.PTE),
			cg, mib(r.QEMUOverhead()), mib(r.Peak), mib(r.TBUnfilled()), mib(r.Shim), mib(r.Worst()), pred>>20,
			mib(pred)-mib(r.Worst()))
	}
	tw.Flush()
	fmt.Fprintln(w, `
All in MiB. touched = resident guest RAM (want ~ guest MiB: the guest zeroed its free pages at boot);
in THP = the part of it in transparent huge pages (fewer page tables).
anon/file = QEMU's RSS split (file: QEMU, its libraries and the mapped guest kernel: reclaimable page cache).
QEMU overhead = max(anon outside guest RAM + PTE, cgroup usage - page cache - touched), after boot;
  peak = the largest anon outside guest RAM + PTE in any sample, during boot (every 250 ms) or after.
stand-in RSS = this process's RSS, for reference only (it is not the shim: see -shim-mib).
worst = max(QEMU overhead, peak) + TB unfilled (the rest of the tb-cache a long-running guest fills) + the shim (-shim-mib).
error = model - worst (positive: the model has headroom).`)

	fit, ok := fitModel(rs)
	if !ok {
		fmt.Fprintln(w, "\nfit: not enough distinct sizes and vCPU counts")
		return
	}
	var shim, firstShim uint64
	for i, r := range rs {
		shim = max(shim, r.Shim)
		if i == 0 {
			firstShim = r.Shim
		}
	}
	fmt.Fprintf(w, "\nLeast squares on QEMU's part (max(QEMU overhead, peak) + TB unfilled): %.1f MiB + %.2f MiB/GiB + %.2f MiB/vCPU (max residual %.1f MiB)\n",
		fit.fixed, fit.perGiB, fit.perVCPU, fit.maxResidual)
	fmt.Fprintf(w, "Stand-in (this process, not counted): %.1f MiB idle with libvirt open, %.1f MiB with the first VM, %.1f MiB at most; the shim counted: %.1f MiB (-shim-mib)\n",
		mib(shimIdle), mib(firstShim), mib(shim), shimMiB)
	c := fit.constants(shimBytes())
	fmt.Fprintf(w, "Suggested: fixed = intercept + max residual + shim, per GiB = fit + %d MiB (TCG's page bookkeeping), each rounded up to whole MiB:\n", tcgPageDescMiBPerGiB)
	fmt.Fprintf(w, "\tOverheadTCG = Overhead{FixedBytes: %d << 20, PerGuestGiBBytes: %d << 20, PerVCPUBytes: %d << 20}\n",
		c.FixedBytes>>20, c.PerGuestGiBBytes>>20, c.PerVCPUBytes>>20)
	worstErr := math.Inf(1)
	for _, r := range rs {
		worstErr = min(worstErr, mib(c.Bytes(uint64(r.GuestMiB)<<20, r.VCPUs))-mib(r.Worst()))
	}
	fmt.Fprintf(w, "Smallest headroom of the suggested model over these runs: %.1f MiB\n", worstErr)
}

// tcgPageDescMiBPerGiB is what a booting guest does not show: TCG keeps a
// 16-byte PageDesc for every guest page of each 4 MiB region that ever
// held translated code (QEMU's accel/tcg), 4 MiB per GiB once code has
// run from all of guest RAM. It is added to the per-GiB slope.
const tcgPageDescMiBPerGiB = 4

type fitResult struct {
	fixed, perGiB, perVCPU, maxResidual float64 // MiB
}

// fitModel fits QEMU's part of the worst case (the shim is apart: its
// stand-in grows with the number of VMs this process has run, which would
// masquerade as a per-GiB cost since sizes run in order) as
// fixed + perGiB*GiB + perVCPU*vCPUs, by least squares over all runs.
func fitModel(rs []result) (fitResult, bool) {
	// Normal equations, 3x3.
	var a [3][3]float64
	var b [3]float64
	for _, r := range rs {
		x := [3]float64{1, float64(r.GuestMiB) / 1024, float64(r.VCPUs)}
		y := mib(r.qemuWorst())
		for i := range 3 {
			for j := range 3 {
				a[i][j] += x[i] * x[j]
			}
			b[i] += x[i] * y
		}
	}
	sol, ok := solve3(a, b)
	if !ok {
		return fitResult{}, false
	}
	f := fitResult{fixed: sol[0], perGiB: sol[1], perVCPU: sol[2]}
	for _, r := range rs {
		res := mib(r.qemuWorst()) - (f.fixed + f.perGiB*float64(r.GuestMiB)/1024 + f.perVCPU*float64(r.VCPUs))
		f.maxResidual = max(f.maxResidual, res)
	}
	return f, true
}

// constants turns a fit and the shim's size into model constants that are
// above every run.
func (f fitResult) constants(shim uint64) vmspec.Overhead {
	perGiB := math.Ceil(max(f.perGiB, 0) + tcgPageDescMiBPerGiB)
	perVCPU := math.Ceil(max(f.perVCPU, 0))
	// Rounding the slopes up only adds headroom; anchor the intercept on
	// the unrounded fit plus its worst residual.
	fixed := math.Ceil(f.fixed + f.maxResidual + mib(shim))
	return vmspec.Overhead{
		FixedBytes:       uint64(fixed) << 20,
		PerGuestGiBBytes: uint64(perGiB) << 20,
		PerVCPUBytes:     uint64(perVCPU) << 20,
	}
}

func solve3(a [3][3]float64, b [3]float64) ([3]float64, bool) {
	for col := range 3 {
		p := col
		for r := col + 1; r < 3; r++ {
			if math.Abs(a[r][col]) > math.Abs(a[p][col]) {
				p = r
			}
		}
		if math.Abs(a[p][col]) < 1e-9 {
			return [3]float64{}, false
		}
		a[col], a[p] = a[p], a[col]
		b[col], b[p] = b[p], b[col]
		for r := range 3 {
			if r == col {
				continue
			}
			k := a[r][col] / a[col][col]
			for c := col; c < 3; c++ {
				a[r][c] -= k * a[col][c]
			}
			b[r] -= k * b[col]
		}
	}
	return [3]float64{b[0] / a[0][0], b[1] / a[1][1], b[2] / a[2][2]}, true
}
