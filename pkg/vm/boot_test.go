package vm_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/vmpod/vmpod/internal/testguest"
	"github.com/vmpod/vmpod/pkg/host"
	"github.com/vmpod/vmpod/pkg/jail"
	"github.com/vmpod/vmpod/pkg/node"
	"github.com/vmpod/vmpod/pkg/virt/libvirt"
	"github.com/vmpod/vmpod/pkg/vm"
	"github.com/vmpod/vmpod/pkg/vmspec"
)

// libvirt allows one embedded root per process, so every VM test of this
// package shares one connection, opened on first use in a temp dir and
// closed (then the dir removed) when the tests end.
var shared struct {
	once sync.Once
	root string
	conn *libvirt.Conn
	rt   *vm.Runtime
	host host.Host
	err  error
}

func runtimeForTest(t testing.TB) (*vm.Runtime, host.Host, string) {
	t.Helper()
	shared.once.Do(func() {
		// Unix socket paths must stay under 108 bytes: keep the root short.
		shared.root, shared.err = os.MkdirTemp("/tmp", "vmpod-vm-")
		if shared.err != nil {
			return
		}
		cleanupAtExit(func() { os.RemoveAll(shared.root) })
		ctx := context.Background()
		// The jailer link the VMs name (LeaseJail makes the same), its
		// capabilities loaded at open, as the node daemon has them.
		jailer, err := jail.LinkEmulator(filepath.Dir(vm.JailerLink(shared.root)))
		if err != nil {
			shared.err = err
			return
		}
		// QEMU's capabilities probed in a process of its own, as the
		// node daemon has them probed (vm-runtime caps-probe), so this
		// process loads them from the cache as vmpod trims it.
		caps := filepath.Join(shared.root, "caps")
		probe := exec.Command(os.Args[0])
		probe.Env = append(os.Environ(), capsProbeEnv+"="+caps, capsProbeJailerEnv+"="+jailer)
		if out, err := probe.CombinedOutput(); err != nil {
			shared.err = fmt.Errorf("probe QEMU's capabilities: %v: %s", err, out)
			return
		}
		shared.conn, shared.err = libvirt.OpenEmbedded(ctx, filepath.Join(shared.root, "libvirt"),
			libvirt.EmbedOptions{CacheDir: caps, Emulators: []string{jailer}})
		if shared.err != nil {
			return
		}
		cleanupAtExit(func() { shared.conn.Close() })
		shared.rt = vm.NewRuntime(shared.conn)
		kvm, err := node.CheckKVM(ctx, node.ProbeOptions{CacheFile: node.DefaultKVMCache})
		if err != nil {
			shared.err = err
			return
		}
		shared.host, shared.err = node.Host(ctx, shared.conn, kvm)
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.rt, shared.host, shared.root
}

// jailForTest is the jail of a test VM laid out in dir: the test binary
// as the jailer, a uid leased for dir until the test ends.
func jailForTest(t testing.TB, root, dir string) vm.Jail {
	t.Helper()
	j, err := vm.LeaseJail(root, jail.DefaultRange, vm.Layout{Dir: dir}, 4<<30)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := vm.ReleaseJail(root, vm.Layout{Dir: dir}); err != nil {
			t.Error(err)
		}
	})
	j.LibvirtRoot = filepath.Join(root, "libvirt") // one libvirt for all test VMs
	return j
}

func podFromFile(t testing.TB, name string) *corev1.Pod {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	if err := yaml.UnmarshalStrict(data, &pod); err != nil {
		t.Fatal(err)
	}
	return &pod
}

// bootTimes is what one boot measured.
type bootTimes struct {
	firstLine, ready time.Duration
}

// TestBootGuest boots the test guest from a Pod manifest through vmspec,
// convert and the embedded libvirt driver under TCG, waits for its markers
// on the serial console, powers it off with the ACPI button, and checks
// that nothing is left behind.
func TestBootGuest(t *testing.T) {
	times := bootGuest(t, "boot-pod.yaml")
	t.Logf("create -> first guest line %v, -> ready %v", times.firstLine.Round(time.Millisecond), times.ready.Round(time.Millisecond))
}

func bootGuest(t testing.TB, podFile string) bootTimes {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	g := startGuest(ctx, t, podFile, nil)

	var times bootTimes
	times.firstLine = g.console.waitFor(ctx, t, "VMPOD-GUEST: init").Sub(g.created)
	g.console.waitFor(ctx, t, "VMPOD-GUEST: cpus=1 memory_kib=")
	g.console.waitFor(ctx, t, "VMPOD-GUEST: disk hello from the vmpod disk")
	times.ready = g.console.waitFor(ctx, t, "VMPOD-GUEST: ready").Sub(g.created)

	if err := g.m.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	g.console.waitFor(ctx, t, "VMPOD-GUEST: poweroff")
	exit, err := g.m.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if exit.Status != 0 || exit.Reason != "Completed" {
		t.Errorf("exit = %+v, want status 0, Completed", exit)
	}
	g.delete(t)
	return times
}

// testGuest is the test guest running as one VM.
type testGuest struct {
	m       *vm.Machine
	name    string
	layout  vm.Layout
	jail    vm.Jail
	pid     int
	console *console
	// created is when Create was called, started when Start was.
	created, started time.Time
	rt               *vm.Runtime
	deleted          bool
}

// startGuest creates and starts the test guest as the pod in
// testdata/podFile, through vmspec, convert and the embedded libvirt
// driver, with QEMU jailed. edit, if not nil, changes the config before
// Create. The VM is deleted, and checked to leave nothing behind, when the
// test ends, however it ends; delete does it earlier.
func startGuest(ctx context.Context, t testing.TB, podFile string, edit func(*vm.Config)) *testGuest {
	t.Helper()
	_, _, root := runtimeForTest(t)
	return startGuestIn(ctx, t, root, podFile, edit)
}

// startGuestIn is startGuest with the VM's dir made in parent, a dir
// below the runtime's root.
func startGuestIn(ctx context.Context, t testing.TB, parent, podFile string, edit func(*vm.Config)) *testGuest {
	t.Helper()
	rt, h, root := runtimeForTest(t)
	spec, err := vmspec.FromPod(podFromFile(t, podFile))
	if err != nil {
		t.Fatal(err)
	}
	img, err := vm.FindImage(containerdiskRootfs(t))
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(img.Kernel) != "vmlinux" || img.Initrd == "" || img.DiskFormat != "qcow2" {
		t.Fatalf("containerdisk: %+v, want /boot/vmlinux, /boot/initrd.img and a qcow2 disk", img)
	}
	dir, err := os.MkdirTemp(parent, "pod-")
	if err != nil {
		t.Fatal(err)
	}
	g := &testGuest{name: spec.Name, layout: vm.Layout{Dir: dir}, jail: jailForTest(t, root, dir), rt: rt}
	cfg := vm.Config{Spec: spec, Host: h, Image: img, Layout: g.layout, MemoryLimit: spec.MemoryBytes + 512<<20, Jail: g.jail}
	if edit != nil {
		edit(&cfg)
	}
	g.created = time.Now()
	if g.m, err = rt.Create(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	// On failure: stop QEMU and remove the domain whatever state it is in.
	t.Cleanup(func() { g.delete(t) })
	g.started = time.Now()
	if err := g.m.Start(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if g.pid, err = g.m.PID(ctx); err != nil || g.pid <= 0 {
		t.Fatalf("QEMU pid %d, %v", g.pid, err)
	}
	testguest.AssertJailed(t, g.pid, cfg.Jail.UID)
	g.console = watchConsole(t, g.layout.ConsoleLog())
	return g
}

// delete deletes the VM, once, and checks that nothing is left.
func (g *testGuest) delete(t testing.TB) {
	t.Helper()
	if g.deleted {
		return
	}
	g.deleted = true
	if err := g.m.Delete(context.Background()); err != nil {
		t.Errorf("Delete: %v", err)
	}
	assertGone(t, g.rt, g.name, g.pid, g.layout.Dir)
}

// assertGone checks that a deleted VM left nothing: no domain, no QEMU
// process, no files in its state dir but the libvirt root, no cgroups.
func assertGone(t testing.TB, rt *vm.Runtime, name string, pid int, dir string) {
	t.Helper()
	names, err := shared.conn.List(context.Background())
	if err != nil {
		t.Error(err)
	}
	for _, n := range names {
		if n == name {
			t.Errorf("domain %s still defined", name)
		}
	}
	if pid > 0 {
		// QEMU may take a moment to be reaped after Destroy returns.
		deadline := time.Now().Add(10 * time.Second)
		for syscall.Kill(pid, 0) == nil && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("QEMU pid %d still exists (%v)", pid, err)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Error(err)
	}
	for _, e := range entries {
		t.Errorf("state dir still holds %s", e.Name())
	}
	if dirs := cgroupsOf(t, name); len(dirs) > 0 {
		t.Errorf("cgroup dirs left: %v", dirs)
	}
}

// cgroupsOf finds cgroup dirs named after the domain in any hierarchy
// (libvirt names them machine-qemu\x2d<id>\x2d<name> or qemu-<id>-<name>).
func cgroupsOf(t testing.TB, name string) []string {
	t.Helper()
	short := name
	if len(short) > 20 {
		short = short[:20]
	}
	var found []string
	ctrls, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, c := range ctrls {
		_ = filepath.WalkDir(c, func(p string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			if strings.Contains(d.Name(), short) {
				found = append(found, p)
				return filepath.SkipDir
			}
			return nil
		})
	}
	return found
}

// console follows the serial log that QEMU writes.
type console struct {
	path  string
	mu    sync.Mutex
	lines []timedLine
	// The log file read so far: its inode (the runtime rotates it) and
	// how many of its lines are in lines.
	ino  uint64
	seen int
}

type timedLine struct {
	at   time.Time
	text string
}

func watchConsole(t testing.TB, path string) *console {
	return &console{path: path}
}

// waitFor polls the log until a line contains marker, and returns when that
// line was first seen. It logs the console when it gives up.
func (c *console) waitFor(ctx context.Context, t testing.TB, marker string) time.Time {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	lastProgress := time.Now()
	for {
		c.poll()
		c.mu.Lock()
		for _, l := range c.lines {
			if strings.Contains(l.text, marker) {
				c.mu.Unlock()
				return l.at
			}
		}
		n := len(c.lines)
		c.mu.Unlock()
		if time.Since(lastProgress) > 15*time.Second {
			t.Logf("still waiting for %q (%d console lines so far)", marker, n)
			lastProgress = time.Now()
		}
		select {
		case <-ctx.Done():
			c.mu.Lock()
			var tail []string
			for _, l := range c.lines[max(0, len(c.lines)-40):] {
				if len(l.text) > 200 {
					l.text = l.text[:200] + "..."
				}
				tail = append(tail, l.text)
			}
			c.mu.Unlock()
			t.Fatalf("no %q on the console: %v\nconsole (last 40 lines):\n%s", marker, ctx.Err(), strings.Join(tail, "\n"))
		case <-tick.C:
		}
	}
}

func (c *console) poll() {
	f, err := os.Open(c.path)
	if err != nil {
		return
	}
	defer f.Close()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return
	}
	now := time.Now()
	lines := strings.Split(string(data), "\n")
	lines = lines[:len(lines)-1] // the last one is not complete yet
	c.mu.Lock()
	defer c.mu.Unlock()
	if st.Ino != c.ino { // rotated: a new file
		c.ino, c.seen = st.Ino, 0
	}
	for _, l := range lines[min(c.seen, len(lines)):] {
		c.lines = append(c.lines, timedLine{at: now, text: strings.TrimRight(l, "\r")})
	}
	c.seen = max(c.seen, len(lines))
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// find returns the first console line containing marker, "" if none yet.
func (c *console) find(marker string) string {
	c.poll()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range c.lines {
		if strings.Contains(l.text, marker) {
			return l.text
		}
	}
	return ""
}
