package remote

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/vmpod/vmpod/pkg/virt"
	"github.com/vmpod/vmpod/pkg/virt/libvirt"
)

// inProcess is a Spawn whose helper is a goroutine serving libvirt's test
// driver, as `vm-runtime hypervisor` serves the embedded one; live counts
// the helpers that have not hung up yet.
func inProcess(t *testing.T, spawns, live *atomic.Int32, openErr error) func(context.Context) (Helper, error) {
	return func(ctx context.Context) (Helper, error) {
		ours, theirs := net.Pipe()
		spawns.Add(1)
		live.Add(1)
		done := make(chan struct{})
		go func() {
			defer close(done)
			defer live.Add(-1)
			if openErr != nil {
				Serve(theirs, nil, openErr)
				return
			}
			hv, err := libvirt.OpenTest(ctx)
			if err != nil {
				Serve(theirs, nil, err)
				return
			}
			Serve(theirs, hv, nil)
			hv.Close()
		}()
		return Helper{Conn: ours, Wait: func() error { <-done; return nil }, Kill: func() { theirs.Close() }}, nil
	}
}

func testXML(name string) string {
	return fmt.Sprintf(`<domain type='test'><name>%s</name><memory unit='MiB'>64</memory><vcpu>1</vcpu><os><type>hvm</type></os></domain>`, name)
}

// TestClientOverHelpers drives libvirt's test driver through a Client:
// results and error classes come through, the helper goes after Idle and
// the next call starts another, and events flow across helpers.
func TestClientOverHelpers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The test driver forgets its domains when its last connection closes;
	// the embedded driver keeps them on disk for the next helper.
	keep, err := libvirt.OpenTest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer keep.Close()
	var spawns, live atomic.Int32
	c, err := Open(ctx, Options{Idle: 100 * time.Millisecond, Spawn: inProcess(t, &spawns, &live, nil)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var mu sync.Mutex
	var seen []virt.Event
	go func() {
		for ev := range c.Events() {
			mu.Lock()
			seen = append(seen, ev)
			mu.Unlock()
		}
	}()

	name := "remote-test-" + fmt.Sprint(os.Getpid())
	if err := c.Define(ctx, testXML(name)); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = c.Destroy(context.Background(), name)
		_ = c.Undefine(context.Background(), name)
	}()
	if err := c.Define(ctx, testXML(name)); !errdefs.IsAlreadyExists(err) {
		t.Errorf("second Define = %v, want AlreadyExists", err)
	}
	if _, err := c.Info(ctx, name+"-missing"); !errdefs.IsNotFound(err) {
		t.Errorf("Info of a missing domain = %v, want NotFound", err)
	}
	if err := c.Start(ctx, name, virt.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	if info, err := c.Info(ctx, name); err != nil || !info.State.Active() {
		t.Fatalf("Info = %+v, %v; want an active domain", info, err)
	}

	// Idle: the helper goes; the domain stays.
	waitFor(t, "the helper to go", func() bool { return live.Load() == 0 })
	if n := spawns.Load(); n != 1 {
		t.Errorf("%d helpers started for calls in a row, want 1", n)
	}
	// The next call starts another, which finds the domain running.
	if info, err := c.Info(ctx, name); err != nil || !info.State.Active() {
		t.Fatalf("Info from a new helper = %+v, %v; want an active domain", info, err)
	}
	if n := spawns.Load(); n != 2 {
		t.Errorf("%d helpers started, want 2", n)
	}
	if err := c.Destroy(ctx, name); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "EventStarted then EventStopped", func() bool {
		mu.Lock()
		defer mu.Unlock()
		started := false
		for _, ev := range seen {
			if ev.Domain == name && ev.Type == virt.EventStarted {
				started = true
			}
			if ev.Domain == name && ev.Type == virt.EventStopped && started {
				return ev.Reason == virt.StopDestroyed
			}
		}
		return false
	})

	// A call in flight keeps the helper: a context that ends first does
	// not hang up on it.
	short, stop := context.WithCancel(ctx)
	stop()
	if _, err := c.List(short); !errdefs.IsCanceled(err) {
		t.Errorf("List with a canceled context = %v, want Canceled", err)
	}
}

// TestOpenReportsTheHelpersError: a helper that cannot open libvirt
// answers with the reason and its class.
func TestOpenReportsTheHelpersError(t *testing.T) {
	var spawns, live atomic.Int32
	want := fmt.Errorf("open qemu:///embed: %w: the QEMU user libvirt-qemu is missing", errdefs.ErrFailedPrecondition)
	_, err := Open(context.Background(), Options{Spawn: inProcess(t, &spawns, &live, want)})
	if !errdefs.IsFailedPrecondition(err) || err.Error() != want.Error() {
		t.Fatalf("Open = %v, want %v (FailedPrecondition)", err, want)
	}
	waitFor(t, "the helper to go", func() bool { return live.Load() == 0 })
}

// TestWatchFollowsQEMU runs a real QEMU (no guest: -machine none) with a
// QMP socket, as libvirt leaves it after its helper went, and checks that
// a watch reports each way QEMU can go with the reason libvirt would.
func TestWatchFollowsQEMU(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(t *testing.T, pid int)
		want virt.StopReason
	}{
		{"SIGKILL", func(t *testing.T, pid int) { syscallKill(t, pid, 9) }, virt.StopFailed},
		{"SIGTERM", func(t *testing.T, pid int) { syscallKill(t, pid, 15) }, virt.StopDestroyed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sock, cmd := startQEMU(t)

			events := make(chan virt.Event, 16)
			w := startWatch(handoff{name: "d", monitor: sock, pid: cmd.Process.Pid}, func(evs ...virt.Event) {
				for _, ev := range evs {
					events <- ev
				}
			})
			// The watch has the monitor once QEMU answers query-status.
			time.Sleep(300 * time.Millisecond)
			tc.end(t, cmd.Process.Pid)
			for {
				select {
				case ev := <-events:
					if ev.Type != virt.EventStopped {
						continue
					}
					if ev.Reason != tc.want {
						t.Errorf("EventStopped reason %v, want %v", ev.Reason, tc.want)
					}
					if w.stop() {
						t.Error("stop reports QEMU alive after it exited")
					}
					return
				case <-time.After(30 * time.Second):
					t.Fatal("no EventStopped 30 s after QEMU was signalled")
				}
			}
		})
	}
}

// TestWatchLetsGo: a stopped watch frees the monitor for the next client
// (libvirt) and reports QEMU alive.
func TestWatchLetsGo(t *testing.T) {
	sock, cmd := startQEMU(t)
	var got []virt.Event
	w := startWatch(handoff{name: "d", monitor: sock, pid: cmd.Process.Pid}, func(evs ...virt.Event) { got = append(got, evs...) })
	time.Sleep(300 * time.Millisecond)
	if !w.stop() {
		t.Fatal("stop reports QEMU gone; it runs")
	}
	if len(got) != 0 {
		t.Errorf("events from a watch let go with QEMU running: %v", got)
	}
	// The monitor answers the next client.
	conn, err := net.DialTimeout("unix", sock, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 256)
	if n, err := conn.Read(buf); err != nil || n == 0 {
		t.Fatalf("no QMP greeting for the next client: %v", err)
	}
}

// startQEMU runs a QEMU with no guest (-machine none; no accelerator
// needed) and a QMP socket, as libvirt leaves one after its helper went
// (-no-shutdown), killed when the test ends. hack/install-deps.sh installs
// QEMU on every machine the tests run on.
func startQEMU(t *testing.T) (monitor string, cmd *exec.Cmd) {
	t.Helper()
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		t.Fatalf("no qemu-system-x86_64 (hack/install-deps.sh installs it): %v", err)
	}
	monitor = filepath.Join(t.TempDir(), "monitor.sock")
	cmd = exec.Command(qemu, "-machine", "none", "-nodefaults", "-display", "none", "-no-shutdown",
		"-qmp", "unix:"+monitor+",server=on,wait=off")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	// The file is there from QEMU's bind, before its listen: wait for a
	// connection (QEMU takes the next one once this one closes).
	waitFor(t, "QEMU's monitor socket", func() bool {
		c, err := net.Dial("unix", monitor)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return monitor, cmd
}

func syscallKill(t *testing.T, pid, sig int) {
	t.Helper()
	p, err := os.FindProcess(pid)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Signal(syscallSignal(sig)); err != nil {
		t.Fatal(err)
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func syscallSignal(sig int) os.Signal { return syscall.Signal(sig) }

// TestStopLogged reads why libvirt last stopped a domain from its log, as
// libvirt 9 writes it, ignoring an earlier run's lines.
func TestStopLogged(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, log string
		want      virt.StopReason
	}{
		{"power-off", "2026-12-03 15:10:20.101+0000: starting up libvirt version: 9.0.0, qemu version: 7.2.0\nLC_ALL=C ...\n2026-12-03 15:10:58.200+0000: shutting down, reason=shutdown\n", virt.StopGuestShutdown},
		{"destroyed", "2026-12-03 15:10:20.101+0000: starting up libvirt version: 9.0.0\nqemu-system-x86_64: terminating on signal 15 from pid 7 (<unknown process>)\n2026-12-03 15:10:58.200+0000: shutting down, reason=destroyed\n", virt.StopDestroyed},
		{"crashed", "x: starting up libvirt\ny: shutting down, reason=crashed\n", virt.StopCrashed},
		{"an earlier run's", "a: starting up libvirt\nb: shutting down, reason=shutdown\nc: starting up libvirt\n", virt.StopFailed},
		{"nothing", "", virt.StopFailed},
	} {
		p := filepath.Join(dir, tc.name+".log")
		if err := os.WriteFile(p, []byte(tc.log), 0o600); err != nil {
			t.Fatal(err)
		}
		if got := stopLogged(p); got != tc.want {
			t.Errorf("%s: stopLogged = %v, want %v", tc.name, got, tc.want)
		}
	}
	if got := stopLogged(filepath.Join(dir, "missing.log")); got != virt.StopFailed {
		t.Errorf("no log: %v, want failed", got)
	}
}

// TestWatchDestroys: with no helper, a Destroy is the watch's: SIGTERM,
// and SIGKILL for a QEMU that does not exit on it (here: stopped, so the
// signal waits); either way EventStopped comes with reason destroyed, before
// destroy returns. A powerdown goes to the monitor once it takes commands.
func TestWatchDestroys(t *testing.T) {
	defer func(d time.Duration) { destroyGrace = d }(destroyGrace)
	destroyGrace = time.Second
	for _, stuck := range []bool{false, true} {
		// (No "=" in the name: it goes into the socket path, which QEMU's
		// option syntax would split.)
		t.Run(map[bool]string{false: "exits", true: "stuck"}[stuck], func(t *testing.T) {
			sock, cmd := startQEMU(t)
			var mu sync.Mutex
			var got []virt.Event
			w := startWatch(handoff{name: "d", monitor: sock, pid: cmd.Process.Pid}, func(evs ...virt.Event) {
				mu.Lock()
				got = append(got, evs...)
				mu.Unlock()
			})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			// -machine none has no ACPI: the button press is taken, and
			// nothing powers off.
			if err := w.powerdown(ctx); err != nil {
				t.Fatalf("powerdown = %v", err)
			}
			if stuck {
				syscallKill(t, cmd.Process.Pid, int(syscall.SIGSTOP))
			}
			if err := w.destroy(ctx); err != nil {
				t.Fatalf("destroy = %v", err)
			}
			mu.Lock()
			defer mu.Unlock()
			var stopped []virt.Event
			for _, ev := range got {
				if ev.Type == virt.EventStopped {
					stopped = append(stopped, ev)
				}
			}
			if len(stopped) != 1 || stopped[0].Reason != virt.StopDestroyed {
				t.Errorf("events after destroy: %v; want one EventStopped, reason destroyed", got)
			}
			if w.alive() {
				t.Error("QEMU alive after destroy returned")
			}
			if err := w.powerdown(ctx); !errors.Is(err, errNoMonitor) {
				t.Errorf("powerdown after QEMU went = %v, want errNoMonitor", err)
			}
		})
	}
}

// TestWatchWithoutMonitor: a watch that cannot reach QEMU's monitor
// refuses a powerdown at once (the caller asks libvirt) instead of waiting
// for a monitor that will not come, and still destroys through the pidfd.
func TestWatchWithoutMonitor(t *testing.T) {
	cmd := exec.Command("sleep", "60") // stands in for a QEMU whose monitor is gone
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	var mu sync.Mutex
	var got []virt.Event
	w := startWatch(handoff{name: "d", monitor: filepath.Join(t.TempDir(), "none.sock"), pid: cmd.Process.Pid}, func(evs ...virt.Event) {
		mu.Lock()
		got = append(got, evs...)
		mu.Unlock()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.powerdown(ctx); !errors.Is(err, errNoMonitor) {
		t.Fatalf("powerdown with no monitor = %v, want errNoMonitor", err)
	}
	if err := w.destroy(ctx); err != nil {
		t.Fatalf("destroy = %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0].Type != virt.EventStopped || got[0].Reason != virt.StopDestroyed {
		t.Errorf("events = %v, want one EventStopped, reason destroyed", got)
	}
}

// TestSettle: after Settle the helper goes as soon as its calls end, not
// Idle later; the next call starts another.
func TestSettle(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var spawns, live atomic.Int32
	c, err := Open(ctx, Options{Idle: time.Hour, Spawn: inProcess(t, &spawns, &live, nil)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.List(ctx); err != nil {
		t.Fatal(err)
	}
	c.Settle()
	waitFor(t, "the helper to go after Settle", func() bool { return live.Load() == 0 })
	c.Settle() // no helper: nothing to do
	if _, err := c.List(ctx); err != nil {
		t.Fatal(err)
	}
	if n, l := spawns.Load(), live.Load(); n != 2 || l != 1 {
		t.Errorf("after a call: %d helpers started, %d live; want 2, 1", n, l)
	}
}
