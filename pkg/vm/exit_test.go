package vm

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/vmpod/vmpod/pkg/virt"
)

func TestExitFor(t *testing.T) {
	killed9 := unix.WaitStatus(9)      // died of SIGKILL
	segv := unix.WaitStatus(11 | 0x80) // died of SIGSEGV, core dumped
	exited3 := unix.WaitStatus(3 << 8) // exit(3)
	exited0 := unix.WaitStatus(0)      // exit(0): QEMU caught a SIGTERM
	tests := []struct {
		name   string
		r      virt.StopReason
		killed bool
		ws     unix.WaitStatus
		known  bool
		want   Exit
	}{
		{"guest power-off", virt.StopGuestShutdown, false, exited0, true, Exit{0, "Completed", "the guest powered off"}},
		{"guest panic", virt.StopCrashed, false, exited0, true, Exit{2, "GuestPanicked", "the guest kernel panicked"}},
		{"hard stop asked for", virt.StopDestroyed, true, killed9, true, Exit{137, "Killed", "stopped hard on request"}},
		{"QEMU caught a signal", virt.StopDestroyed, false, exited0, true, Exit{137, "Killed", "the VM was stopped hard, not on the runtime's request"}},
		{"QEMU SIGKILLed", virt.StopFailed, false, killed9, true, Exit{137, "QEMUKilled", "QEMU was killed by SIGKILL"}},
		{"QEMU SIGKILLed after a stop was asked", virt.StopFailed, true, killed9, true, Exit{137, "QEMUKilled", "QEMU was killed by SIGKILL"}},
		{"QEMU crashed", virt.StopFailed, false, segv, true, Exit{139, "QEMUKilled", "QEMU was killed by SIGSEGV (core dumped)"}},
		{"QEMU exited with an error", virt.StopFailed, false, exited3, true, Exit{1, "QEMUFailed", "QEMU exited unexpectedly with status 3"}},
		{"QEMU went, the kernel would not say how", virt.StopFailed, false, 0, false, Exit{1, "QEMUFailed", "QEMU exited unexpectedly"}},
		{"no reason", virt.StopUnknown, false, 0, false, Exit{1, "QEMUFailed", "the VM stopped (unknown)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, exitFor(tt.r, tt.killed, tt.ws, tt.known)); diff != "" {
				t.Errorf("exit (-want +got):\n%s", diff)
			}
		})
	}
}

func TestConsoleNote(t *testing.T) {
	if got := exitFor(virt.StopGuestShutdown, false, 0, false).consoleNote(); got != "" {
		t.Errorf("note after a power-off: %q, want none", got)
	}
	want := "vmpod: the guest kernel panicked (GuestPanicked, exit status 2)"
	if got := exitFor(virt.StopCrashed, false, 0, false).consoleNote(); got != want {
		t.Errorf("note after a panic: %q, want %q", got, want)
	}
}

func TestParseZombieStat(t *testing.T) {
	// A command name may hold spaces and parentheses; fields count from
	// the last ')'. Field 52 is the exit code.
	tail := " 1 100 100 0 -1 4228108 26 0 0 0 0 0 0 0 20 0 1 0 5 0 0 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 "
	tests := []struct {
		name string
		stat string
		ws   unix.WaitStatus
		ok   bool
	}{
		{"zombie killed by SIGKILL", "42 (qemu-system-x86) Z" + tail + "9", 9, true},
		{"odd name", "42 (a) Z b)) Z" + tail + "256", 256, true},
		{"running", "42 (qemu) S" + tail + "0", 0, false},
		{"short", "42 (qemu) Z 1 2", 0, false},
		{"garbage", "nothing", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ws, ok := parseZombieStat(tt.stat)
			if ws != tt.ws || ok != tt.ok {
				t.Errorf("parseZombieStat = %v, %v; want %v, %v", ws, ok, tt.ws, tt.ok)
			}
		})
	}
}

// TestQEMUProcStatus: the wait status of a process that is not the
// caller's child (as QEMU is not: libvirt daemonizes it), from the kernel.
func TestQEMUProcStatus(t *testing.T) {
	tests := []struct {
		name   string
		script string // runs in the background of a shell that exits at once
		kill   bool
		check  func(unix.WaitStatus) bool
	}{
		{"killed", "sleep 100", true, func(ws unix.WaitStatus) bool { return ws.Signaled() && ws.Signal() == unix.SIGKILL }},
		{"exited", "sleep 0.5; exit 3", false, func(ws unix.WaitStatus) bool { return ws.Exited() && ws.ExitStatus() == 3 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := exec.Command("sh", "-c", "sh -c '"+tt.script+"' >/dev/null 2>&1 & echo $!").Output()
			if err != nil {
				t.Fatal(err)
			}
			pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = unix.Kill(pid, unix.SIGKILL) })
			p := openQEMU(context.Background(), nil, virt.Info{PID: pid})
			if p == nil {
				t.Fatalf("no pidfd on %d", pid)
			}
			defer p.close()
			if tt.kill {
				if err := unix.Kill(pid, unix.SIGKILL); err != nil {
					t.Fatal(err)
				}
			}
			ws, ok := p.status(10 * time.Second)
			if !ok {
				t.Skip("this kernel keeps no exit status with a pidfd, and init reaped the process before it was read")
			}
			if !tt.check(ws) {
				t.Errorf("wait status %#x (exited %v, status %d, signaled %v, signal %v)", uint32(ws), ws.Exited(), ws.ExitStatus(), ws.Signaled(), ws.Signal())
			}
		})
	}
}
