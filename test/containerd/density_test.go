package containerd_test

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/vmpod/vmpod/internal/procmem"
	"github.com/vmpod/vmpod/pkg/vmspec"
)

// Knobs of BenchmarkDensity, for trying other sizes by hand; make bench
// runs it with none set.
const (
	// densityPodsEnv: how many VM pods (default 20).
	densityPodsEnv = "VMPOD_DENSITY_PODS"
	// densityGuestEnv: guest RAM in MiB (default densityGuestMiB).
	densityGuestEnv = "VMPOD_DENSITY_GUEST_MIB"
	// densityParallelEnv: how many pods are being started at a time
	// (default: all of them).
	densityParallelEnv = "VMPOD_DENSITY_PARALLEL"
)

// densityGuestMiB is the smallest guest RAM, in 16 MiB steps, that the test
// guest boots in reliably with 20 booting at once. The issue asks for
// 64 MiB, which no Debian kernel boots in: the x86 kernel runs at 16 MiB
// physical or above, and the 6.1 image needs 63.6 MiB above that (the
// bzImage's init_size; the cloud flavour's 51.5 MiB; the uncompressed
// vmlinux ends at 74 MiB), so a 64 MiB guest resets while decompressing
// (vmlinuz) or cannot be loaded (vmlinux). At 80 and 88 MiB the kernel runs
// out of memory before /init; 96 MiB reaches /init alone but, with 20
// guests booting at once, a few in 20 panic out of memory first (the
// initramfs unpacks concurrently with driver init). docs/overhead.md has
// the numbers.
const densityGuestMiB = 112

// BenchmarkDensity is the density check, through real containerd
// and crictl: 20 VM pods (densityGuestMiB guests, 1 vCPU, TCG) started at
// once on one node, each in a pod cgroup limited as the kubelet limits it
// (the container's limit plus the RuntimeClass's overhead.podFixed). It
// reports start-to-/init (from `crictl start` to the guest's
// "VMPOD-GUEST: init" line in the CRI log, by that line's timestamp) as
// p50/p95, checks that no VM was OOM-killed, and compares the node's
// memory used (MemAvailable, with the per-CPU free lists it leaves out
// (available), before the pods minus after, with every guest ready; and,
// apart from whatever else the machine runs, the pod cgroups'
// usage) with what the pods reserve (limits plus podFixed): the overhead
// model must be an upper bound (used <= reserved, else the benchmark
// fails); the issue asks for used within 10% of reserved, which the table
// shows (the ratio) and docs/overhead.md discusses. Then it removes the
// pods and checks that nothing is left. One run is one measurement (make bench: -benchtime 1x);
// about 3-4 minutes on 2 cores.
func BenchmarkDensity(b *testing.B) {
	n := envInt(b, densityPodsEnv, 20)
	guestMiB := envInt(b, densityGuestEnv, densityGuestMiB)
	parallel := envInt(b, densityParallelEnv, n)
	for b.Loop() {
		r := runDensity(b, n, guestMiB, parallel)
		r.print()
		b.ReportMetric(r.percentile(50).Seconds(), "s-init-p50")
		b.ReportMetric(r.percentile(95).Seconds(), "s-init-p95")
		b.ReportMetric(float64(r.usedKiB)/1024, "MiB-used")
		b.ReportMetric(float64(r.usedKiB)/1024/float64(r.reservedMiB()), "used/reserved")
		// MemAvailable (the measure, with the per-CPU free lists)
		// counts everything on the machine, other work included; the pod cgroups count the pods
		// alone. Neither may pass what the pods reserve.
		reserved := r.reservedMiB() * 1024
		if r.usedKiB > reserved {
			b.Errorf("memory used (MemAvailable and the per-CPU free lists, before minus after) %d MiB is above the pods' limits plus RuntimeClass overhead, %d MiB: "+
				"the overhead model is not an upper bound (docs/overhead.md), or something else on the machine grew (the pod cgroups hold %d MiB)",
				r.usedKiB/1024, reserved/1024, r.cgroupKiB/1024)
		}
		if r.filled.usedKiB > reserved {
			b.Errorf("memory used after the guests used their RAM, %d MiB, is above the pods' limits plus RuntimeClass overhead, %d MiB: the overhead model is not an upper bound (docs/overhead.md)",
				r.filled.usedKiB/1024, reserved/1024)
		}
		b.ReportMetric(float64(r.filled.usedKiB)/1024/float64(r.reservedMiB()), "used/reserved-filled")
		b.ReportMetric(float64(r.filled.cgroupKiB+r.containerdKiB)/1024/float64(r.reservedMiB()), "cgroups/reserved-filled")
		if max(r.cgroupKiB, r.filled.cgroupKiB)+r.containerdKiB > reserved {
			b.Errorf("the pod cgroups hold %d MiB (%d after the guests used their RAM) and containerd grew %d MiB, above the pods' limits plus RuntimeClass overhead, %d MiB: the overhead model is not an upper bound (docs/overhead.md)",
				r.cgroupKiB/1024, r.filled.cgroupKiB/1024, r.containerdKiB/1024, reserved/1024)
		}
	}
}

func envInt(b testing.TB, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < 1 {
		b.Fatalf("%s=%q: want a positive number", name, s)
	}
	return v
}

// densityRun is what one run measured.
type densityRun struct {
	pods, guestMiB int
	podFixedMiB    int
	// toInit is start-to-/init per pod, sorted.
	toInit []time.Duration
	// usedKiB is what is available (available) before the pods minus
	// after; usedBy splits it by the /proc/meminfo fields that grew
	// (meminfoKinds).
	usedKiB int
	usedBy  map[string]int
	// perCPUFreeKiB is the free pages on the per-CPU lists before, after,
	// and after the guests used their RAM.
	perCPUFreeKiB [3]int
	// containerdKiB is what containerd's own PSS grew by.
	containerdKiB int
	// cgroupKiB sums the pod cgroups' usage less page cache: QEMU and
	// the shim as the memory cgroups charge them; peakKiB is the largest
	// pod cgroup's peak usage (page cache included).
	cgroupKiB, peakKiB int
	shims, qemus       procmem.Process
	modelMiB           int
	// filled is measured again after each guest wrote 70 MiB to its RAM.
	filled struct {
		usedKiB, cgroupKiB int
		qemus              procmem.Process
	}
}

// heldKiB is what grew in /proc/meminfo's meminfoKinds: the pods and
// anything else the machine ran meanwhile.
func (r densityRun) heldKiB() int {
	n := 0
	for _, v := range r.usedBy {
		n += v
	}
	return n
}

func (r densityRun) reservedMiB() int { return r.pods * (r.guestMiB + r.podFixedMiB) }

// percentile is the nearest-rank percentile of toInit.
func (r densityRun) percentile(p int) time.Duration {
	i := (p*len(r.toInit)+99)/100 - 1
	return r.toInit[max(i, 0)]
}

func runDensity(b *testing.B, n, guestMiB, parallel int) densityRun {
	node := startVMNode(b, "./cmd/containerd-shim-vmpod-v2", nil)
	c := node.c
	// The pods are of the RuntimeClass for small VMs (vmpod-small), as a
	// user running 112 MiB VMs would pick.
	podFixed := vmspec.EnvelopeSmall.PodFixedBytes()
	r := densityRun{pods: n, guestMiB: guestMiB, podFixedMiB: int(podFixed >> 20),
		modelMiB: int(vmspec.OverheadTCG.Bytes(uint64(guestMiB)<<20, 1) >> 20)}

	pods := make([]*vmPod, n)
	cgroups := make([]string, n)
	for i := range pods {
		p := node.newVMPod("dens", i, guestMiB)
		// What the kubelet does for a Guaranteed pod of the vmpod-small
		// RuntimeClass: the pod's resources and overhead in the sandbox
		// config, and the pod cgroup limited to both.
		limit := int64(guestMiB)<<20 + int64(podFixed)
		p.cfg.Linux.Resources = p.ctrCfg.Linux.Resources
		p.cfg.Linux.Overhead = &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: int64(podFixed)}
		cgroups[i] = kubeletPodCgroup(b, p.cfg.Linux.CgroupParent, limit)
		pods[i] = p
	}
	b.Cleanup(func() { node.removeAll(b, pods) })

	before := meminfo(b)
	ctrdBefore := readAll(b, []int{c.PID()})[0]
	r.toInit = startAll(b, node, pods, parallel)
	for _, p := range pods {
		waitLogs(b, c, p.ctr, "VMPOD-GUEST: ready", 4*time.Minute)
	}
	shimPIDs, qemuPIDs := node.pids(b, pods)
	shims, qemus := settleAndSample(b, shimPIDs, qemuPIDs)
	after := meminfo(b)
	r.usedKiB = available(before) - available(after)
	r.perCPUFreeKiB = [3]int{before[perCPUFree], after[perCPUFree]}
	r.usedBy = map[string]int{}
	for _, k := range meminfoKinds {
		r.usedBy[k] = after[k] - before[k]
	}
	r.containerdKiB = readAll(b, []int{c.PID()})[0].Total.PSS - ctrdBefore.Total.PSS
	for i := range pods {
		shim, qemu := shims[i], qemus[i]
		r.shims.Add(shim)
		r.qemus.Add(qemu)
		u, peak := cgroupUsage(b, cgroups[i])
		r.cgroupKiB += u
		r.peakKiB = max(r.peakKiB, peak)
	}
	// The guests have not touched all their RAM yet: each writes 70 MiB to
	// its root (initramfs, RAM) and removes it, which leaves that much of
	// its RAM resident in QEMU, as a guest that used its memory. The model
	// must hold then too.
	for _, p := range pods {
		c.MustCrictl(b, "exec", p.ctr, "sh", "-c", "dd if=/dev/zero of=/fill bs=1048576 count=70 2>/dev/null; rm -f /fill")
	}
	_, qemus2 := settleAndSample(b, shimPIDs, qemuPIDs)
	filled := meminfo(b)
	r.filled.usedKiB = available(before) - available(filled)
	r.perCPUFreeKiB[2] = filled[perCPUFree]
	for i := range pods {
		r.filled.qemus.Add(qemus2[i])
		u, peak := cgroupUsage(b, cgroups[i])
		r.filled.cgroupKiB += u
		r.peakKiB = max(r.peakKiB, peak)
	}
	assertNoOOM(b, node, pods, cgroups)

	node.removeAll(b, pods)
	for i, p := range pods {
		assertNoPodLeft(b, p.cfg.Linux.CgroupParent, node.state)
		if err := os.Remove(cgroups[i]); err != nil {
			b.Errorf("pod cgroup left busy after the pod was removed: %v", err)
		}
	}
	// QEMU and the shims may take a moment to exit after rmp returns.
	left := append(shimPIDs, qemuPIDs...)
	for deadline := time.Now().Add(30 * time.Second); len(left) > 0 && time.Now().Before(deadline); {
		left = slices.DeleteFunc(left, func(pid int) bool { return !procRunning(pid) })
		time.Sleep(200 * time.Millisecond)
	}
	if len(left) > 0 {
		b.Errorf("processes %v of the removed pods still run 30 s later", left)
	}
	return r
}

// kubeletPodCgroup makes the pod's memory cgroup with the kubelet's limit
// (cgroup v1, as on this machine; containerd and the shim make the rest)
// and returns its directory.
func kubeletPodCgroup(b testing.TB, parent string, limit int64) string {
	b.Helper()
	dir := filepath.Join("/sys/fs/cgroup/memory", parent)
	if err := os.Mkdir(dir, 0o755); err != nil {
		b.Fatalf("pod cgroup: %v", err)
	}
	b.Cleanup(func() { os.Remove(dir) })
	if err := os.WriteFile(filepath.Join(dir, "memory.limit_in_bytes"), []byte(strconv.FormatInt(limit, 10)), 0o644); err != nil {
		b.Fatalf("pod cgroup limit: %v", err)
	}
	return dir
}

// startAll runs, for every pod and at most parallel at a time, crictl runp,
// create and start, and returns each pod's start-to-/init, sorted. The
// /init time is the CRI log line's own timestamp, so polling adds nothing.
func startAll(b *testing.B, node *vmNode, pods []*vmPod, parallel int) []time.Duration {
	c := node.c
	// The config files are written here: WriteJSON may fail the
	// benchmark, which only this goroutine may do.
	type files struct{ pod, ctr string }
	fs := make([]files, len(pods))
	for i, p := range pods {
		fs[i].pod = c.WriteJSON(b, "pod-"+p.cfg.Metadata.Name+".json", p.cfg)
		fs[i].ctr = c.WriteJSON(b, "ctr-"+p.cfg.Metadata.Name+".json", p.ctrCfg)
	}
	started := make([]time.Time, len(pods))
	errs := make([]error, len(pods))
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for i, p := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			out, err := c.Crictl(b, "runp", "--runtime", "vmpod", fs[i].pod)
			if err != nil {
				errs[i] = fmt.Errorf("runp: %w", err)
				return
			}
			p.pod = strings.TrimSpace(out)
			if out, err = c.Crictl(b, "create", "--no-pull", p.pod, fs[i].ctr, fs[i].pod); err != nil {
				errs[i] = fmt.Errorf("create: %w", err)
				return
			}
			p.ctr = strings.TrimSpace(out)
			started[i] = time.Now()
			if _, err := c.Crictl(b, "start", p.ctr); err != nil {
				errs[i] = fmt.Errorf("start: %w", err)
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			b.Fatalf("pod %s: %v", pods[i].cfg.Metadata.Name, err)
		}
	}
	toInit := make([]time.Duration, len(pods))
	for i, p := range pods {
		log := filepath.Join(p.cfg.LogDirectory, p.ctrCfg.LogPath)
		at := waitLogLine(b, log, "VMPOD-GUEST: init", 4*time.Minute)
		toInit[i] = at.Sub(started[i])
	}
	slices.Sort(toInit)
	return toInit
}

// waitLogLine polls a CRI log file until a line holds marker and returns
// that line's timestamp.
func waitLogLine(b testing.TB, path, marker string, timeout time.Duration) time.Time {
	b.Helper()
	deadline := time.Now().Add(timeout)
	for {
		f, err := os.Open(path)
		if err == nil {
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				// <RFC3339Nano> <stream> <P|F> <text>
				ts, rest, _ := strings.Cut(sc.Text(), " ")
				if !strings.Contains(rest, marker) {
					continue
				}
				f.Close()
				at, err := time.Parse(time.RFC3339Nano, ts)
				if err != nil {
					b.Fatalf("%s: line %q: %v", path, sc.Text(), err)
				}
				return at
			}
			f.Close()
		}
		if log, _ := os.ReadFile(path); strings.Contains(string(log), "Kernel panic") {
			b.Fatalf("%s: the guest kernel panicked before %q:\n%s", path, marker, lastLines(log, 40))
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(path)
			b.Fatalf("no %q in %s within %v:\n%s", marker, path, timeout, lastLines(log, 40))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}

// assertNoOOM checks that every VM still runs and that no pod cgroup
// OOM-killed anything.
func assertNoOOM(b testing.TB, node *vmNode, pods []*vmPod, cgroups []string) {
	b.Helper()
	for i, p := range pods {
		out := node.c.MustCrictl(b, "inspect", "-o", "go-template", "--template",
			"{{.status.state}} {{.status.reason}} {{.status.exitCode}}", p.ctr)
		if f := strings.Fields(out); len(f) == 0 || f[0] != "CONTAINER_RUNNING" {
			b.Errorf("pod %s: VM is %q, want running", p.cfg.Metadata.Name, strings.TrimSpace(out))
		}
		if k := readKeyed(b, filepath.Join(cgroups[i], "memory.oom_control"), "oom_kill"); k != 0 {
			b.Errorf("pod %s: %d OOM kills in its cgroup", p.cfg.Metadata.Name, k)
		}
	}
}

// cgroupUsage is a pod cgroup's usage less page cache, and its peak usage,
// in KiB.
func cgroupUsage(b testing.TB, dir string) (usage, peak int) {
	b.Helper()
	read := func(f string) int {
		s, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			b.Fatal(err)
		}
		v, err := strconv.Atoi(strings.TrimSpace(string(s)))
		if err != nil {
			b.Fatalf("%s/%s: %v", dir, f, err)
		}
		return v
	}
	cache := readKeyed(b, filepath.Join(dir, "memory.stat"), "total_cache")
	return (read("memory.usage_in_bytes") - cache) >> 10, read("memory.max_usage_in_bytes") >> 10
}

// readKeyed reads the value of a "key value" line.
func readKeyed(b testing.TB, path, key string) int {
	b.Helper()
	s, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(s), "\n") {
		if v, ok := strings.CutPrefix(line, key+" "); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				b.Fatalf("%s: %q: %v", path, line, err)
			}
			return n
		}
	}
	b.Fatalf("%s: no %s", path, key)
	return 0
}

// meminfoKinds are the /proc/meminfo fields that account for memory a
// running VM pod holds and the kernel cannot reclaim.
var meminfoKinds = []string{"AnonPages", "PageTables", "KernelStack", "SUnreclaim", "Shmem"}

// perCPUFree is meminfo's key for the free pages on the per-CPU lists, in
// KiB (perCPUFreeKiB).
const perCPUFree = "PerCPUFree"

// available is what the kernel could hand out: MemAvailable, the issue's
// measure, plus the free pages on the per-CPU lists, which MemFree and so
// MemAvailable leave out. Those lists are not small: since Linux 6.7 the
// kernel grows a CPU's list while that CPU frees a lot (up to
// /proc/zoneinfo's high_max, 1 GiB per CPU on a 24 GiB machine), so a
// build or a test that ended before the pods started can leave hundreds of
// MiB there, and the pods' first allocations come from it without
// MemAvailable falling. (2026-12-03: 536 MiB on one CPU's list at rest; a
// run's MemAvailable fell 13 MiB per pod less than the pods' anonymous
// memory grew.)
func available(m map[string]int) int { return m["MemAvailable"] + m[perCPUFree] }

// meminfo is /proc/meminfo in KiB, with perCPUFree from /proc/zoneinfo.
func meminfo(b testing.TB) map[string]int {
	b.Helper()
	s, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		b.Fatal(err)
	}
	m := map[string]int{}
	for _, line := range strings.Split(string(s), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		if n, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB"))); err == nil {
			m[k] = n
		}
	}
	m[perCPUFree] = perCPUFreeKiB(b)
	return m
}

// perCPUFreeKiB sums the "count:" of every CPU's page set in every zone of
// /proc/zoneinfo: free pages held on per-CPU lists.
func perCPUFreeKiB(b testing.TB) int {
	b.Helper()
	s, err := os.ReadFile("/proc/zoneinfo")
	if err != nil {
		b.Fatal(err)
	}
	pages, sets := 0, 0
	for _, line := range strings.Split(string(s), "\n") {
		v, ok := strings.CutPrefix(strings.TrimSpace(line), "count:")
		if !ok {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			b.Fatalf("/proc/zoneinfo: %q: %v", line, err)
		}
		pages += n
		sets++
	}
	if sets == 0 {
		b.Fatal("/proc/zoneinfo: no per-CPU page set counts")
	}
	return pages * os.Getpagesize() >> 10
}

// procRunning: pid exists and is not a zombie.
func procRunning(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	return err == nil && !isZombie(stat)
}

func (r densityRun) print() {
	per := func(kib int) string { return procmem.MiB(kib / r.pods) }
	var w strings.Builder
	fmt.Fprintf(&w, "\ndensity: %d VM pods started at once (%d MiB guests, 1 vCPU, TCG); RuntimeClass vmpod-small, podFixed %d MiB; overhead model %d MiB\n",
		r.pods, r.guestMiB, r.podFixedMiB, r.modelMiB)
	fmt.Fprintf(&w, "%5s %9s %9s %9s %10s %6s %9s %9s %9s %9s %9s\n",
		"pods", "init p50", "init p95", "used MiB", "limits+OH", "ratio", "QEMU PSS", "guest res", "shim PSS", "cgroup", "peak")
	fmt.Fprintf(&w, "%5d %8.1fs %8.1fs %9d %10d %6.2f %9s %9s %9s %9s %9s\n",
		r.pods, r.percentile(50).Seconds(), r.percentile(95).Seconds(), r.usedKiB/1024, r.reservedMiB(),
		float64(r.usedKiB)/1024/float64(r.reservedMiB()), per(r.qemus.Total.PSS), per(r.qemus.LargestAnon.RSS),
		per(r.shims.Total.PSS), per(r.cgroupKiB), procmem.MiB(r.peakKiB))
	fmt.Fprintf(&w, "%5s %9s %9s %9d %10d %6.2f %9s %9s %9s %9s %9s   after each guest wrote 70 MiB to its RAM\n",
		"", "", "", r.filled.usedKiB/1024, r.reservedMiB(), float64(r.filled.usedKiB)/1024/float64(r.reservedMiB()),
		per(r.filled.qemus.Total.PSS), per(r.filled.qemus.LargestAnon.RSS), "", per(r.filled.cgroupKiB), "")
	fmt.Fprintf(&w, "used: MemAvailable plus the per-CPU free lists (%s, %s and %s MiB) before the pods minus after, all guests ready (and again after they used their RAM); limits+OH: %d x (%d + %d) MiB, what the pod cgroups allow and the scheduler counts.\n",
		procmem.MiB(r.perCPUFreeKiB[0]), procmem.MiB(r.perCPUFreeKiB[1]), procmem.MiB(r.perCPUFreeKiB[2]), r.pods, r.guestMiB, r.podFixedMiB)
	var by []string
	for _, k := range meminfoKinds {
		by = append(by, fmt.Sprintf("%s %s", k, per(r.usedBy[k])))
	}
	rawUsed := func(used, pcpAfter int) int { return used - (r.perCPUFreeKiB[0] - pcpAfter) }
	fmt.Fprintf(&w, "MemAvailable alone: %d MiB, ratio %.2f; after the guests used their RAM: %d MiB, ratio %.2f (the per-CPU lists handed out %s MiB, which MemAvailable does not see)\n",
		rawUsed(r.usedKiB, r.perCPUFreeKiB[1])/1024, float64(rawUsed(r.usedKiB, r.perCPUFreeKiB[1]))/1024/float64(r.reservedMiB()),
		rawUsed(r.filled.usedKiB, r.perCPUFreeKiB[2])/1024, float64(rawUsed(r.filled.usedKiB, r.perCPUFreeKiB[2]))/1024/float64(r.reservedMiB()),
		procmem.MiB(r.perCPUFreeKiB[0]-r.perCPUFreeKiB[2]))
	fmt.Fprintf(&w, "pod cgroups (less page cache) + containerd's growth: %d MiB, ratio %.2f; after the guests used their RAM: %d MiB, ratio %.2f\n",
		(r.cgroupKiB+r.containerdKiB)/1024, float64(r.cgroupKiB+r.containerdKiB)/1024/float64(r.reservedMiB()),
		(r.filled.cgroupKiB+r.containerdKiB)/1024, float64(r.filled.cgroupKiB+r.containerdKiB)/1024/float64(r.reservedMiB()))
	fmt.Fprintf(&w, "used per pod %s MiB; what grew in /proc/meminfo, per pod: %s MiB = %s; containerd's PSS %s\n",
		per(r.usedKiB), per(r.heldKiB()), strings.Join(by, ", "), per(r.containerdKiB))
	fmt.Fprintf(&w, "Per pod (MiB): QEMU PSS; guest res: the guest RAM QEMU has resident; shim PSS; cgroup: the pod cgroup's usage less page cache (QEMU and shim as charged). peak: the largest pod cgroup's peak usage, page cache included (limit %d MiB).\n",
		r.guestMiB+r.podFixedMiB)
	fmt.Print(w.String())
}
