package shim_test

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	taskAPI "github.com/containerd/containerd/api/runtime/task/v3"

	"github.com/vmpod/vmpod/internal/testguest"
	"github.com/vmpod/vmpod/pkg/vmspec"
)

// lastLine is the last non-empty line the shim wrote to the task's stdout.
func (s *serial) lastLine() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.lines) - 1; i >= 0; i-- {
		if l := strings.TrimRight(s.lines[i], "\r"); l != "" {
			return l
		}
	}
	return ""
}

// waitExit is the VM task's exit, once the shim says it exited, with
// QEMU gone.
func (e *podEnv) waitExit(t *testing.T, ctx context.Context, c taskAPI.TTRPCTaskService, qemuPID uint32) *taskAPI.WaitResponse {
	t.Helper()
	w, err := c.Wait(ctx, &taskAPI.WaitRequest{ID: e.p.vmID})
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if !waitGone(int(qemuPID), 10*time.Second) {
		t.Errorf("QEMU %d still runs after the VM task exited", qemuPID)
	}
	return w
}

// TestShimGuestPanics: a guest kernel panic ends the VM task with exit
// status 2 (GuestPanicked), so the restart policy applies; the panic is
// on the task's stdout (kubectl logs --previous), which ends with a line
// saying how the VM ended, as containerd passes on no reason.
func TestShimGuestPanics(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	e := newPodEnv(t)
	panicking := map[string]string{vmspec.AnnotationKernelCmdline: "vmpod.test=panic"}
	writeBundle(t, e.p.sandboxBundle, sandboxSpec(e.p, e.podNS, panicking))
	writeBundle(t, e.p.vmBundle, vmSpec(e.p, e.podNS, "", panicking))
	c, qemuPID := e.runPod(t, ctx)
	e.stdout.waitFor(t, "VMPOD-GUEST: panicking", 3*time.Minute)

	w := e.waitExit(t, ctx, c, qemuPID)
	if w.ExitStatus != 2 {
		t.Errorf("exit status %d after a guest panic, want 2 (GuestPanicked)", w.ExitStatus)
	}
	e.stdout.waitFor(t, "Kernel panic - not syncing", 10*time.Second)
	e.stdout.waitFor(t, "vmpod: ", 10*time.Second)
	if got, want := e.stdout.lastLine(), "vmpod: the guest kernel panicked (GuestPanicked, exit status 2)"; got != want {
		t.Errorf("last stdout line %q, want %q", got, want)
	}
	e.shimLog.waitFor(t, "VM exited: 2 GuestPanicked", 10*time.Second)
	e.deletePod(t, ctx, c)
	e.assertClean(t)
}

// TestShimQEMUKilled: a QEMU killed with SIGKILL (not by the shim) ends
// the VM task with 137, and stdout's last line names the signal.
func TestShimQEMUKilled(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	e := newPodEnv(t)
	c, qemuPID := e.runPod(t, ctx)
	e.stdout.waitFor(t, "VMPOD-GUEST: init", 2*time.Minute)
	if err := syscall.Kill(int(qemuPID), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	w := e.waitExit(t, ctx, c, qemuPID)
	e.stdout.waitFor(t, "vmpod: ", 10*time.Second)
	status, line := uint32(137), "vmpod: QEMU was killed by SIGKILL (QEMUKilled, exit status 137)"
	if !testguest.KernelKeepsExitStatus() && w.ExitStatus == 1 {
		t.Logf("exit status 1: this kernel keeps no exit status with a pidfd")
		status, line = 1, "vmpod: QEMU exited unexpectedly (QEMUFailed, exit status 1)"
	}
	if w.ExitStatus != status {
		t.Errorf("exit status %d after QEMU was killed, want %d", w.ExitStatus, status)
	}
	if got := e.stdout.lastLine(); got != line {
		t.Errorf("last stdout line %q, want %q", got, line)
	}
	e.deletePod(t, ctx, c)
	e.assertClean(t)
}
