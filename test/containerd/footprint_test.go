package containerd_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vmpod/vmpod/internal/procmem"
	"github.com/vmpod/vmpod/internal/testenv/containerd"
)

// Knobs of BenchmarkShimFootprint, for comparing shim variants by hand;
// make bench runs it with none set.
const (
	// footprintPodsEnv: how many VM pods (default 10).
	footprintPodsEnv = "VMPOD_FOOTPRINT_PODS"
	// footprintShimEnv: the package whose binary containerd runs as
	// containerd-shim-vmpod-v2 (default ./cmd/containerd-shim-vmpod-v2,
	// relative to the repo root; ./cmd/vm-runtime is the whole node
	// binary reached through the same name).
	footprintShimEnv = "VMPOD_FOOTPRINT_SHIM"
	// footprintShimEnvEnv: space-separated NAME=VALUE added to
	// containerd's environment, which its shims inherit (e.g.
	// "MALLOC_ARENA_MAX=2 GOGC=50").
	footprintShimEnvEnv = "VMPOD_FOOTPRINT_ENV"
	// footprintDumpEnv: a directory to copy each shim's smaps,
	// smaps_rollup and status into while the VMs run.
	footprintDumpEnv = "VMPOD_FOOTPRINT_DUMP"
	// footprintGuestEnv: guest RAM in MiB (default 128: the test guest's uncompressed kernel alone is 65 MB, so 64 MiB guests never boot).
	footprintGuestEnv = "VMPOD_FOOTPRINT_GUEST_MIB"
	// footprintHoldEnv: keep the pods running this long after measuring,
	// to look at them by hand (e.g. "10m").
	footprintHoldEnv = "VMPOD_FOOTPRINT_HOLD"
)

func footprintGuestMiB() int {
	if n, err := strconv.Atoi(os.Getenv(footprintGuestEnv)); err == nil && n > 0 {
		return n
	}
	return 128
}

// BenchmarkShimFootprint runs 10 VM pods (128 MiB test guests) through a
// real containerd and crictl, waits until every guest is ready, and
// reports what the shims weigh per pod: the sum of their PSS over the
// pods, as the node pays it, plus RSS and private anonymous memory, split
// by kind of mapping (internal/procmem), and QEMU's PSS for reference.
// One run is one measurement (make bench: -benchtime 1x); a few minutes on
// 2 cores.
func BenchmarkShimFootprint(b *testing.B) {
	n := 10
	if s := os.Getenv(footprintPodsEnv); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n < 1 {
			b.Fatalf("%s=%q: want a positive number", footprintPodsEnv, s)
		}
	}
	pkg := os.Getenv(footprintShimEnv)
	if pkg == "" {
		pkg = "./cmd/containerd-shim-vmpod-v2"
	}
	var env []string
	if s := os.Getenv(footprintShimEnvEnv); s != "" {
		env = strings.Fields(s)
	}
	for b.Loop() {
		shims, qemus, ready := runFootprint(b, n, pkg, env)
		var shim, qemu procmem.Process
		for _, p := range shims {
			shim.Add(p)
		}
		for _, p := range qemus {
			qemu.Add(p)
		}
		printFootprint(n, pkg, env, shim, qemu, ready)
		b.ReportMetric(float64(shim.Total.PSS)/1024/float64(n), "MiB-shim-PSS/pod")
		b.ReportMetric(float64(shim.Total.RSS)/1024/float64(n), "MiB-shim-RSS/pod")
		b.ReportMetric(float64(shim.Total.PrivateAnon)/1024/float64(n), "MiB-shim-anon/pod")
		b.ReportMetric(float64(qemu.Total.PSS)/1024/float64(n), "MiB-QEMU-PSS/pod")
	}
}

// runFootprint starts n pods and samples their shims and QEMUs three
// times, 3 s apart, once every guest is ready; it returns the last sample
// and how long the pods took to be ready.
func runFootprint(b *testing.B, n int, pkg string, env []string) (shims, qemus []procmem.Process, ready time.Duration) {
	node := startVMNode(b, pkg, env)
	c := node.c

	start := time.Now()
	pods := make([]*vmPod, n)
	for i := range pods {
		pods[i] = node.newVMPod("fp", i, footprintGuestMiB())
	}
	b.Cleanup(func() { node.removeAll(b, pods) })
	var helper string
	for i, p := range pods {
		node.run(b, p)
		if i == 0 {
			helper = helperRow(b, c, p)
		}
		c.MustCrictl(b, "start", p.ctr)
	}
	for _, p := range pods {
		waitLogs(b, c, p.ctr, "VMPOD-GUEST: ready", 4*time.Minute)
	}
	ready = time.Since(start)

	shimPIDs, qemuPIDs := node.pids(b, pods)
	shims, qemus = settleAndSample(b, shimPIDs, qemuPIDs)
	// A helper still running (a shim that needed libvirt in the last 5 s)
	// is part of what its pod costs at that moment: counted with the shims.
	helpers := libvirtHelpers(b, shimPIDs)
	shims = append(shims, readAll(b, helpers)...)
	fmt.Printf("libvirt helpers running at the sample: %d (counted in the shim rows)\n", len(helpers))
	fmt.Print(helper)
	if dir := os.Getenv(footprintDumpEnv); dir != "" {
		dumpProcs(b, dir, shimPIDs)
	}
	if s := os.Getenv(footprintHoldEnv); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			b.Fatalf("%s=%q: %v", footprintHoldEnv, s, err)
		}
		fmt.Printf("holding %d pods for %v: shims %v, QEMUs %v\n", n, d, shimPIDs, qemuPIDs)
		time.Sleep(d)
	}
	return shims, qemus, ready
}

// helperRow measures the libvirt helper a shim started for its VM, with
// the VM created and not yet started (the helper goes as soon as the start
// is done; nothing else in a pod's life starts one but its delete): what a
// pod pays, on top of its shim, while its shim needs libvirt.
func helperRow(b *testing.B, c *containerd.Containerd, p *vmPod) string {
	helpers := libvirtHelpers(b, []int{c.InspectPod(b, p.pod).PID})
	if len(helpers) != 1 {
		b.Fatalf("libvirt helpers of a pod whose VM is created, not started: %v, want one", helpers)
	}
	h := readAll(b, helpers)[0]
	b.ReportMetric(float64(h.Total.PrivateAnon)/1024, "MiB-helper-anon")
	return fmt.Sprintf("libvirt helper of one pod, its VM created: PSS %s, RSS %s, private anon %s MiB (it goes once the VM has started)\n",
		procmem.MiB(h.Total.PSS), procmem.MiB(h.Total.RSS), procmem.MiB(h.Total.PrivateAnon))
}

func dumpProcs(b *testing.B, dir string, pids []int) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	for _, pid := range pids {
		for _, f := range []string{"smaps", "smaps_rollup", "status", "maps"} {
			data, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, f))
			if err != nil {
				b.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("shim-%d.%s", pid, f)), data, 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	fmt.Printf("shim smaps of %v in %s\n", pids, dir)
}

// printFootprint prints the per-pod table: the whole shim, then by kind of
// mapping, then QEMU.
func printFootprint(n int, pkg string, env []string, shim, qemu procmem.Process, ready time.Duration) {
	per := func(kib int) string { return procmem.MiB(kib / n) }
	var w strings.Builder
	fmt.Fprintf(&w, "\nshim footprint: %d VM pods (%d MiB guests, TCG), shim %s", n, footprintGuestMiB(), pkg)
	if len(env) > 0 {
		fmt.Fprintf(&w, " with %s", strings.Join(env, " "))
	}
	fmt.Fprintf(&w, "; all guests ready after %v\n", ready.Round(100*time.Millisecond))
	fmt.Fprintf(&w, "%-34s %8s %8s %8s\n", "MiB per pod", "PSS", "RSS", "anon")
	row := func(name string, u procmem.Usage) {
		fmt.Fprintf(&w, "%-34s %8s %8s %8s\n", name, per(u.PSS), per(u.RSS), per(u.PrivateAnon))
	}
	row(fmt.Sprintf("shim PSS per pod (%d pods)", n), shim.Total)
	for _, k := range procmem.Kinds {
		row("  "+string(k), shim.ByKind[k])
	}
	fmt.Fprintf(&w, "%-34s %8d\n", "  threads", shim.Threads/n)
	row("QEMU (reference)", qemu.Total)
	fmt.Print(w.String())
}
