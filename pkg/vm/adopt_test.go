package vm_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vmpod/vmpod/pkg/vm"
)

// TestAdopt: a VM created and started, then abandoned as by a process
// that died (its console connection closed, its Machine forgotten), is
// taken over from its record: the same QEMU, the console log going on
// after what it held, Exec, Stats, and Stop with the guest powering off
// (0, Completed); Delete leaves nothing.
func TestAdopt(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	rt, h, root := runtimeForTest(t)
	dir, err := os.MkdirTemp(root, "pod-")
	if err != nil {
		t.Fatal(err)
	}
	var rec records
	req := lifecycleRequest(t, "boot-pod.yaml", "adopt", dir, &rec)
	req.Jail = jailForTest(t, root, dir)
	open := func(context.Context) (vm.Env, error) { return vm.Env{Runtime: rt, Host: h}, nil }

	first, err := vm.Create(ctx, req, open)
	if err != nil {
		t.Fatal(err)
	}
	current := first
	t.Cleanup(func() { _ = current.Delete(context.Background()) })
	pid, err := first.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	log := watchConsole(t, req.Layout.ConsoleLog())
	log.waitFor(ctx, t, "VMPOD-GUEST: ready")
	if _, err := first.Exec(ctx, vm.ExecRequest{Args: []string{"/bin/sh", "-c", "echo VMPOD-BEFORE-ADOPT >/dev/console"}}); err != nil {
		t.Fatal(err)
	}
	log.waitFor(ctx, t, "VMPOD-BEFORE-ADOPT")
	first.Abandon()

	held := rec.last()
	adopted, err := vm.Adopt(ctx, vm.AdoptRequest{Spec: req.Spec, Layout: req.Layout, Held: held, Record: rec.record}, open)
	if err != nil {
		t.Fatal(err)
	}
	current = adopted
	if got := adopted.Held(); got.Domain != held.Domain || got.Cgroup != held.Cgroup {
		t.Errorf("adopted VM holds %+v, want %+v", got, held)
	}
	res, err := adopted.Exec(ctx, vm.ExecRequest{Args: []string{"/bin/sh", "-c", "echo VMPOD-AFTER-ADOPT >/dev/console"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 {
		t.Errorf("exec after adopt: %+v", res)
	}
	log.waitFor(ctx, t, "VMPOD-AFTER-ADOPT")
	b, err := os.ReadFile(req.Layout.ConsoleLog())
	if err != nil {
		t.Fatal(err)
	}
	for _, marker := range []string{"VMPOD-GUEST: init", "VMPOD-GUEST: ready", "VMPOD-BEFORE-ADOPT"} {
		if n := strings.Count(string(b), marker); n != 1 {
			t.Errorf("console log after adopt has %q %d times, want once:\n%s", marker, n, b)
		}
	}
	if _, err := adopted.Stats(); err != nil {
		t.Errorf("Stats of the adopted VM: %v", err)
	}
	if _, err := adopted.Start(ctx); err == nil {
		t.Error("Start of an adopted, running VM succeeded")
	}
	if p, err := rtPID(ctx, req.Spec.Name); err != nil || p != pid {
		t.Errorf("QEMU after adopt: pid %d, %v; want the same QEMU, %d", p, err, pid)
	}

	exit, err := adopted.Stop(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if exit.Status != 0 || exit.Reason != "Completed" {
		t.Errorf("Stop of the adopted VM: %+v, want the guest powered off (0, Completed)", exit)
	}
	if err := adopted.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	if got := rec.last(); !got.Empty() {
		t.Errorf("last record %+v, want nothing held", got)
	}
	assertGone(t, rt, req.Spec.Name, pid, dir)
	assertNotMounted(t, req.Rootfs)
}

// TestAdoptStoppedOrFailed: a VM that stopped while abandoned is adopted
// as exited, with the reason; an adoption that fails (here: the console
// socket is not where the request says) undoes what the record names.
func TestAdoptStoppedOrFailed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rt, h, root := runtimeForTest(t)
	start := func(name string) (vm.Request, *records, vm.Opener, int) {
		dir, err := os.MkdirTemp(root, "pod-")
		if err != nil {
			t.Fatal(err)
		}
		rec := &records{}
		req := lifecycleRequest(t, "boot-pod.yaml", name, dir, rec)
		req.Jail = jailForTest(t, root, dir)
		open := func(context.Context) (vm.Env, error) { return vm.Env{Runtime: rt, Host: h}, nil }
		v, err := vm.Create(ctx, req, open)
		if err != nil {
			t.Fatal(err)
		}
		pid, err := v.Start(ctx)
		if err != nil {
			_ = v.Delete(ctx)
			t.Fatal(err)
		}
		v.Abandon()
		t.Cleanup(func() { _ = vm.Undo(context.Background(), shared.conn, rec.last()) })
		return req, rec, open, pid
	}

	t.Run("stopped", func(t *testing.T) {
		req, rec, open, pid := start("adopt-stopped")
		if err := shared.conn.Destroy(ctx, req.Spec.Name); err != nil {
			t.Fatal(err)
		}
		v, err := vm.Adopt(ctx, vm.AdoptRequest{Spec: req.Spec, Layout: req.Layout, Held: rec.last(), Record: rec.record}, open)
		if err != nil {
			t.Fatal(err)
		}
		wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
		exit, err := v.Wait(wctx)
		wcancel()
		if err != nil {
			t.Fatalf("Wait of a VM adopted stopped: %v, want its exit at once", err)
		}
		if exit.Status != 137 || exit.Reason != "Killed" || !strings.Contains(exit.Message, "not running") {
			t.Errorf("exit of a VM destroyed while abandoned: %+v, want 137 Killed, saying the runtime was not running", exit)
		}
		if err := v.Delete(ctx); err != nil {
			t.Fatal(err)
		}
		if got := rec.last(); !got.Empty() {
			t.Errorf("last record %+v, want nothing held", got)
		}
		assertGone(t, rt, req.Spec.Name, pid, req.Layout.Dir)
	})

	t.Run("failed", func(t *testing.T) {
		req, rec, open, pid := start("adopt-failed")
		wrong := vm.Layout{Dir: t.TempDir()}
		_, err := vm.Adopt(ctx, vm.AdoptRequest{Spec: req.Spec, Layout: wrong, Held: rec.last(), Record: rec.record}, open)
		if err == nil || !strings.Contains(err.Error(), "serial console") {
			t.Fatalf("Adopt with the console not where the layout says: %v, want the console's error", err)
		}
		if got := rec.last(); !got.Empty() {
			t.Errorf("last record after a failed Adopt %+v, want nothing held (undone)", got)
		}
		names, err := shared.conn.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			if n == req.Spec.Name {
				t.Errorf("domain %s still defined after a failed Adopt", n)
			}
		}
		waitGone(t, pid)
	})
}

// rtPID is the pid of the running domain name's QEMU.
func rtPID(ctx context.Context, name string) (int, error) {
	info, err := shared.conn.Info(ctx, name)
	return info.PID, err
}

// waitGone fails the test if process pid is still there after a bounded
// wait (QEMU is reaped a moment after Destroy returns).
func waitGone(t *testing.T, pid int) {
	t.Helper()
	for i := 0; i < 200 && syscall.Kill(pid, 0) == nil; i++ {
		time.Sleep(50 * time.Millisecond)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("QEMU pid %d still exists (%v)", pid, err)
	}
}
