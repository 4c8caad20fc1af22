package libvirt

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
	"libvirt.org/go/libvirtxml"

	"github.com/vmpod/vmpod/pkg/virt"
)

// libvirt allows one embed root per process, and re-attaching is only
// real when a new process does it, so TestEmbedded runs each scenario in a
// child process of the test binary (TestEmbeddedHelper).
const helperEnv = "VMPOD_VIRT_EMBED_HELPER"

func TestEmbedded(t *testing.T) {
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Fatal("qemu-system-x86_64 not found: run hack/install-deps.sh; the embedded driver test boots real QEMU")
	}
	base := t.TempDir()
	cache := filepath.Join(base, "capscache")
	rootA, rootB := filepath.Join(base, "a"), filepath.Join(base, "b")
	// Registered after TempDir, so it runs before the dirs are removed.
	t.Cleanup(func() {
		reapRoot(t, rootA)
		reapRoot(t, rootB)
	})
	requireQEMUUser(t)
	// An emulator off the PATH, as vmpod's jailer is: its capabilities
	// must reach the cache at open, not be probed at each root's Define.
	qemu, _ := exec.LookPath("qemu-system-x86_64")
	emulator := filepath.Join(base, "bin", "emulator")
	must(t, os.MkdirAll(filepath.Dir(emulator), 0o755))
	must(t, os.Symlink(qemu, emulator))
	t.Setenv("VMPOD_VIRT_EMULATOR", emulator)

	runHelper(t, "lifecycle", rootA, cache, base)
	if files, _ := filepath.Glob(filepath.Join(cache, "*.xml")); len(files) == 0 {
		t.Errorf("capabilities cache %s still empty after the first open", cache)
	}
	if !ColdCache(filepath.Join(base, "empty"), nil) || !ColdCache(cache, []string{emulator + "-other"}) {
		t.Errorf("ColdCache: an empty cache, or one without an emulator's entry, is not cold")
	}
	if ColdCache(cache, []string{emulator}) {
		t.Errorf("no capabilities of %s in the cache after the first open", emulator)
	}

	runHelper(t, "reattach-start", rootB, cache, base)
	for _, name := range []string{"quick", "slow", "dead"} {
		if pid := readInt(t, filepath.Join(base, name+".pid")); !processAlive(pid) {
			t.Fatalf("QEMU %d of %s did not outlive the process that started it", pid, name)
		}
	}
	// QEMU dies while no process watches it (OOM killer, node trouble).
	deadPID := readInt(t, filepath.Join(base, "dead.pid"))
	must(t, syscall.Kill(deadPID, syscall.SIGKILL))
	if !waitProcessGone(deadPID, 10*time.Second) {
		t.Fatalf("QEMU %d survived SIGKILL", deadPID)
	}
	runHelper(t, "reattach-finish", rootB, cache, base)

	cold := time.Duration(readInt(t, filepath.Join(base, "lifecycle.open")))
	warm := time.Duration(readInt(t, filepath.Join(base, "reattach-start.open")))
	again := time.Duration(readInt(t, filepath.Join(base, "reattach-finish.open")))
	t.Logf("OpenEmbedded: cold root, empty cache %v; new root, warm cache %v; existing root %v", cold, warm, again)
}

func runHelper(t *testing.T, scenario, root, cache, out string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestEmbeddedHelper$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"="+scenario,
		"VMPOD_VIRT_ROOT="+root, "VMPOD_VIRT_CACHE="+cache, "VMPOD_VIRT_OUT="+out)
	// QEMU may outlive the helper; never wait on output pipes it inherited.
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	b, err := cmd.CombinedOutput()
	t.Logf("helper %s (%v):\n%s", scenario, time.Since(start).Round(time.Millisecond), b)
	if err != nil {
		t.Fatalf("helper %s: %v", scenario, err)
	}
}

// TestEmbeddedHelper is one scenario of TestEmbedded, in a process of its
// own. Run directly it does nothing (like os/exec's TestHelperProcess).
func TestEmbeddedHelper(t *testing.T) {
	scenario := os.Getenv(helperEnv)
	if scenario == "" {
		return
	}
	root, out := os.Getenv("VMPOD_VIRT_ROOT"), os.Getenv("VMPOD_VIRT_OUT")
	start := time.Now()
	opts := EmbedOptions{CacheDir: os.Getenv("VMPOD_VIRT_CACHE")}
	if e := os.Getenv("VMPOD_VIRT_EMULATOR"); e != "" {
		opts.Emulators = []string{e}
	}
	c, err := OpenEmbedded(context.Background(), root, opts)
	if err != nil {
		t.Fatal(err)
	}
	writeInt(t, filepath.Join(out, scenario+".open"), int(time.Since(start)))
	assertNoThreadPinned(t)
	t.Logf("OpenEmbedded(%s) took %v", root, time.Since(start))
	switch scenario {
	case "lifecycle":
		helperLifecycle(t, c, root)
	case "reattach-start":
		helperReattachStart(t, c, root, out)
	case "reattach-finish":
		helperReattachFinish(t, c, root, out)
	default:
		t.Fatalf("unknown scenario %q", scenario)
	}
}

func helperLifecycle(t *testing.T, c *Conn, root string) {
	ctx := context.Background()
	const name = "vm1"
	t.Cleanup(func() { _ = c.Close() })
	rec := recordEvents(c)

	caps, domCaps, err := c.Capabilities(ctx, "")
	must(t, err)
	var dc libvirtxml.DomainCaps
	must(t, dc.Unmarshal(domCaps))
	wantAccel := "qemu"
	if _, err := os.Stat("/dev/kvm"); err == nil {
		wantAccel = "kvm" // libvirt offers KVM wherever /dev/kvm opens
	}
	if !strings.Contains(caps, "<capabilities>") || dc.Domain != wantAccel || dc.Arch != "x86_64" {
		t.Errorf("Capabilities: domain caps for %s/%s, want %s/x86_64", dc.Domain, dc.Arch, wantAccel)
	}
	// Asked for TCG (where the KVM probe failed), libvirt answers for TCG.
	_, domCaps, err = c.Capabilities(ctx, "qemu")
	must(t, err)
	must(t, dc.Unmarshal(domCaps))
	if dc.Domain != "qemu" {
		t.Errorf("Capabilities(qemu): domain caps for %s, want qemu", dc.Domain)
	}

	// A serial file owned by someone else must stay theirs
	// (dynamic_ownership = 0).
	serial := filepath.Join(root, "serial.log")
	must(t, os.WriteFile(serial, nil, 0o666))
	must(t, os.Chown(serial, 65534, 65534))

	must(t, c.Define(ctx, domainXML(t, "qemu", name, serial)))
	t.Cleanup(func() {
		_ = c.Destroy(ctx, name)
		_ = c.Undefine(ctx, name)
	})
	must(t, c.Start(ctx, name, virt.StartOptions{Paused: true}))
	info := mustInfo(t, c, name, virt.StatePaused)
	pid := info.PID
	if !processAlive(pid) {
		t.Fatalf("Info.PID %d: no such process", pid)
	}
	cgroups := domainCgroupDirs(t, pid, root)
	t.Logf("QEMU %d cgroups: %v", pid, cgroups)

	const limit = 512 << 20
	must(t, c.SetMemoryHardLimit(ctx, name, limit))
	if got := memoryLimit(t, cgroups); got != limit {
		t.Errorf("memory cgroup limit = %d, want %d", got, limit)
	}
	must(t, c.Resume(ctx, name))
	if got := mustInfo(t, c, name, virt.StateRunning); got.PID != pid {
		t.Errorf("PID changed from %d to %d on resume", pid, got.PID)
	}

	st, err := c.Stats(ctx, name)
	must(t, err)
	t.Logf("Stats: %+v", st)
	if st.CPUTime <= 0 || st.MemoryActual != 64<<20 || st.MemoryRSS == 0 {
		t.Errorf("Stats = %+v, want CPU time > 0, 64 MiB actual, RSS > 0", st)
	}
	if fi, err := os.Stat(serial); err != nil || fi.Sys().(*syscall.Stat_t).Uid != 65534 {
		t.Errorf("serial log %s was chowned or removed (err %v)", serial, err)
	}
	// The domain has no guest agent channel: the caller learns that, fast.
	if _, err := c.AgentCommand(ctx, name, `{"execute":"guest-ping"}`, time.Second); !errdefs.IsFailedPrecondition(err) ||
		!strings.Contains(err.Error(), "no guest agent channel") {
		t.Errorf("AgentCommand without a channel: err = %v, want FailedPrecondition naming the missing channel", err)
	}
	names, err := c.List(ctx)
	must(t, err)
	if diff := cmp.Diff([]string{name}, names); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}

	// QEMU killed under an attached connection (the OOM killer's way).
	must(t, c.Define(ctx, domainXML(t, "qemu", "victim", "")))
	must(t, c.Start(ctx, "victim", virt.StartOptions{}))
	victim := mustInfo(t, c, "victim", virt.StateRunning).PID
	must(t, syscall.Kill(victim, syscall.SIGKILL))
	// libvirt's event says QEMU failed, its state says crashed.
	if ev := rec.waitForType(t, "victim", virt.EventStopped, 10*time.Second); ev.Reason != virt.StopFailed {
		t.Errorf("victim: %+v, want reason failed", ev)
	}
	if info := mustInfo(t, c, "victim", virt.StateShutoff); info.Reason != virt.StopCrashed {
		t.Errorf("victim: Info = %+v, want reason crashed", info)
	}
	must(t, c.Undefine(ctx, "victim"))

	must(t, c.Destroy(ctx, name))
	if got := mustInfo(t, c, name, virt.StateShutoff); got.Reason != virt.StopDestroyed || got.PID != 0 {
		t.Errorf("Info after Destroy = %+v, want reason destroyed, no pid", got)
	}
	must(t, c.Undefine(ctx, name))

	want := []virt.Event{
		{Domain: name, Type: virt.EventDefined},
		{Domain: name, Type: virt.EventStarted},
		{Domain: name, Type: virt.EventSuspended},
		{Domain: name, Type: virt.EventResumed},
		// Destroy sends QEMU SIGTERM first; QEMU reports a host-initiated
		// shutdown before it exits.
		{Domain: name, Type: virt.EventShutdown, Reason: virt.StopDestroyed},
		{Domain: name, Type: virt.EventStopped, Reason: virt.StopDestroyed},
		{Domain: name, Type: virt.EventUndefined},
	}
	if diff := cmp.Diff(want, rec.waitForCount(t, name, len(want), 10*time.Second)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	assertGone(t, c, root, pid, cgroups)
}

// helperReattachStart starts three domains, closes and reopens the
// connection in this process, and leaves the QEMUs running for
// helperReattachFinish.
func helperReattachStart(t *testing.T, c *Conn, root, out string) {
	ctx := context.Background()
	pids := map[string]int{}
	for _, name := range []string{"quick", "slow", "dead"} {
		must(t, c.Define(ctx, domainXML(t, "qemu", name, filepath.Join(root, name+".log"))))
		must(t, c.Start(ctx, name, virt.StartOptions{}))
		pids[name] = mustInfo(t, c, name, virt.StateRunning).PID
	}
	must(t, c.Close())

	c, err := OpenEmbedded(ctx, root, EmbedOptions{})
	must(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			for name := range pids {
				_ = c.Destroy(ctx, name)
				_ = c.Undefine(ctx, name)
			}
		}
		_ = c.Close()
	})
	for name, pid := range pids {
		if got := mustInfo(t, c, name, virt.StateRunning).PID; got != pid {
			t.Errorf("%s after reopening in-process: PID %d, want %d", name, got, pid)
		}
		writeInt(t, filepath.Join(out, name+".pid"), pid)
	}
}

// helperReattachFinish is the restarted shim: it finds the domains the
// previous process left running, and stops and removes them. "quick" is
// destroyed right after the connect, while libvirt is still re-attaching
// to it in the background. "dead" was killed while no process watched it.
// "slow" is looked at before it is destroyed.
func helperReattachFinish(t *testing.T, c *Conn, root, out string) {
	ctx := context.Background()
	t.Cleanup(func() { _ = c.Close() })
	rec := recordEvents(c)

	quickPID := readInt(t, filepath.Join(out, "quick.pid"))
	quickCgroups := domainCgroupDirs(t, quickPID, root)
	must(t, c.Destroy(ctx, "quick"))
	info := mustInfo(t, c, "quick", virt.StateShutoff)
	t.Logf("quick: Info right after Destroy: %+v", info)
	if info.Reason != virt.StopDestroyed {
		t.Errorf("quick: Info after Destroy = %+v, want reason destroyed", info)
	}
	rec.waitFor(t, virt.Event{Domain: "quick", Type: virt.EventStopped, Reason: virt.StopDestroyed}, 10*time.Second)
	must(t, c.Undefine(ctx, "quick"))
	if !waitProcessGone(quickPID, 5*time.Second) {
		t.Errorf("quick: QEMU %d still running", quickPID)
	}

	// libvirt finds "dead" gone when it re-attaches, calls it crashed,
	// and leaves its cgroups for Undefine's sweep to remove.
	info = mustInfo(t, c, "dead", virt.StateShutoff)
	if info.Reason != virt.StopCrashed {
		t.Errorf("dead: Info = %+v, want reason crashed", info)
	}
	must(t, c.Undefine(ctx, "dead"))

	slowPID := readInt(t, filepath.Join(out, "slow.pid"))
	if got := mustInfo(t, c, "slow", virt.StateRunning).PID; got != slowPID {
		t.Fatalf("slow re-attached: PID %d, want %d", got, slowPID)
	}
	slowCgroups := domainCgroupDirs(t, slowPID, root)
	if st, err := c.Stats(ctx, "slow"); err != nil || st.MemoryRSS == 0 {
		t.Errorf("Stats after re-attach = %+v, %v", st, err)
	}
	must(t, c.Destroy(ctx, "slow"))
	info = mustInfo(t, c, "slow", virt.StateShutoff)
	t.Logf("slow: Info after Destroy: %+v", info)
	rec.waitFor(t, virt.Event{Domain: "slow", Type: virt.EventStopped, Reason: virt.StopDestroyed}, 10*time.Second)
	must(t, c.Undefine(ctx, "slow"))

	assertGone(t, c, root, slowPID, append(quickCgroups, slowCgroups...))
}

func assertGone(t *testing.T, c *Conn, root string, pid int, cgroups []string) {
	t.Helper()
	if !waitProcessGone(pid, 5*time.Second) {
		t.Errorf("QEMU %d still running", pid)
	}
	names, err := c.List(context.Background())
	must(t, err)
	if len(names) != 0 {
		t.Errorf("List = %v, want none", names)
	}
	for _, d := range cgroups {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("cgroup %s left behind", d)
		}
	}
	if left := leftoverCgroups(root); len(left) != 0 {
		t.Errorf("cgroups of root left behind: %v", left)
	}
}

func mustInfo(t *testing.T, c *Conn, name string, want virt.State) virt.Info {
	t.Helper()
	info, err := c.Info(context.Background(), name)
	must(t, err)
	if info.State != want {
		t.Fatalf("Info(%s).State = %v, want %v", name, info.State, want)
	}
	if want.Active() != (info.PID > 0) {
		t.Fatalf("Info(%s) = %+v: PID and state disagree", name, info)
	}
	return info
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func writeInt(t *testing.T, path string, v int) {
	t.Helper()
	must(t, os.WriteFile(path, []byte(strconv.Itoa(v)), 0o644))
}

func readInt(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	must(t, err)
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	must(t, err)
	return v
}

// assertNoThreadPinned: OpenEmbedded pins itself to one CPU while libvirt
// checks its capabilities cache (onOneCPU); afterwards no thread of the
// process may be left on one CPU when the process may use more.
func assertNoThreadPinned(t *testing.T) {
	t.Helper()
	var all unix.CPUSet
	must(t, unix.SchedGetaffinity(0, &all))
	if all.Count() < 2 {
		return
	}
	tids, err := os.ReadDir("/proc/self/task")
	must(t, err)
	for _, e := range tids {
		tid, _ := strconv.Atoi(e.Name())
		var set unix.CPUSet
		if unix.SchedGetaffinity(tid, &set) == nil && set.Count() == 1 {
			t.Errorf("thread %d is left pinned to one CPU after OpenEmbedded", tid)
		}
	}
}
