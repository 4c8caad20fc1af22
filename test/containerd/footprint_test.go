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
)

// Knobs of BenchmarkShimFootprint, for comparing shim variants by hand;
// make bench runs it with none set.
const (
	// footprintPodsEnv: the pod counts it measures at, in increasing
	// order, comma-separated (default 1,10,50).
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

// footprintSteps are the pod counts to measure at.
func footprintSteps(b testing.TB) []int {
	s := os.Getenv(footprintPodsEnv)
	if s == "" {
		return []int{1, 10, 50}
	}
	var steps []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || (len(steps) > 0 && n <= steps[len(steps)-1]) {
			b.Fatalf("%s=%q: want increasing positive pod counts such as 1,10,50", footprintPodsEnv, s)
		}
		steps = append(steps, n)
	}
	return steps
}

// BenchmarkShimFootprint is what a VM pod costs the node beyond its guest
// and QEMU: its shim, and its share of the node daemon. It runs the test
// guest (128 MiB, TCG) in VM pods through a real containerd, crictl and
// vm-runtime daemon, adding pods up to each count of footprintSteps (1,
// 10, 50), waits until every guest is ready, and reports per count: the
// shims' PSS summed and divided by the pods (as the node pays it), with
// RSS and private anonymous memory split by kind of mapping
// (internal/procmem); the daemon's PSS, and its growth per pod beyond
// its PSS with one pod (libvirt open, one VM: its base); and QEMU's PSS
// for reference. One run is one measurement (make bench: -benchtime 1x).
func BenchmarkShimFootprint(b *testing.B) {
	steps := footprintSteps(b)
	pkg := os.Getenv(footprintShimEnv)
	if pkg == "" {
		pkg = "./cmd/containerd-shim-vmpod-v2"
	}
	var env []string
	if s := os.Getenv(footprintShimEnvEnv); s != "" {
		env = strings.Fields(s)
	}
	for b.Loop() {
		node := startVMNode(b, pkg, env)
		var pods []*vmPod
		b.Cleanup(func() { node.removeAll(b, pods) })
		var base procmem.Process
		for i, n := range steps {
			start := time.Now()
			for len(pods) < n {
				p := node.newVMPod("fp", len(pods), footprintGuestMiB())
				pods = append(pods, p)
				node.run(b, p)
				node.c.MustCrictl(b, "start", p.ctr)
			}
			for _, p := range pods {
				waitLogs(b, node.c, p.ctr, "VMPOD-GUEST: ready", 10*time.Minute)
			}
			ready := time.Since(start)
			shimPIDs, qemuPIDs := node.pids(b, pods)
			shims, qemus := settleAndSample(b, shimPIDs, qemuPIDs)
			daemon := readAll(b, []int{node.c.DaemonPID()})[0]
			if i == 0 {
				base = daemon
			}
			var shim, qemu procmem.Process
			for _, p := range shims {
				shim.Add(p)
			}
			for _, p := range qemus {
				qemu.Add(p)
			}
			printFootprint(n, pkg, env, shim, qemu, ready)
			printDaemon(n, steps[0], daemon, base)
			b.ReportMetric(float64(shim.Total.PSS)/1024/float64(n), fmt.Sprintf("MiB-shim-PSS/pod@%d", n))
			b.ReportMetric(float64(daemon.Total.PSS)/1024, fmt.Sprintf("MiB-daemon-PSS@%d", n))
			if n > steps[0] {
				b.ReportMetric(float64(daemon.Total.PSS-base.Total.PSS)/1024/float64(n-steps[0]), fmt.Sprintf("MiB-daemon-PSS/pod@%d", n))
			}
			b.ReportMetric(float64(qemu.Total.PSS)/1024/float64(n), fmt.Sprintf("MiB-QEMU-PSS/pod@%d", n))
			if dir := os.Getenv(footprintDumpEnv); dir != "" {
				dumpProcs(b, filepath.Join(dir, strconv.Itoa(n)), shimPIDs)
			}
		}
		if s := os.Getenv(footprintHoldEnv); s != "" {
			d, err := time.ParseDuration(s)
			if err != nil {
				b.Fatalf("%s=%q: %v", footprintHoldEnv, s, err)
			}
			fmt.Printf("holding %d pods for %v (daemon %d)\n", len(pods), d, node.c.DaemonPID())
			time.Sleep(d)
		}
		node.removeAll(b, pods)
	}
}

// printDaemon prints the node daemon's rows: its whole PSS with n pods
// and, past the first count, what it grew by per pod beyond its PSS with
// first pods.
func printDaemon(n, first int, daemon, base procmem.Process) {
	fmt.Printf("%-34s %8s %8s %8s\n", fmt.Sprintf("node daemon, whole (%d pods)", n),
		procmem.MiB(daemon.Total.PSS), procmem.MiB(daemon.Total.RSS), procmem.MiB(daemon.Total.PrivateAnon))
	if n > first {
		per := func(a, b int) string { return procmem.MiB((a - b) / (n - first)) }
		fmt.Printf("%-34s %8s %8s %8s\n", fmt.Sprintf("  per pod beyond %d pod(s)", first),
			per(daemon.Total.PSS, base.Total.PSS), per(daemon.Total.RSS, base.Total.RSS), per(daemon.Total.PrivateAnon, base.Total.PrivateAnon))
	}
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
