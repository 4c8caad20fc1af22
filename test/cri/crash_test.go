package cri_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vmpod/vmpod/internal/testguest"
)

// TestCrictlGuestPanics: on a VM-only node a guest kernel panic ends the
// container with exit code 2 and reason GuestPanicked in its status; its
// log keeps the panic and ends with a line saying so. The kubelet's
// restart (the next attempt, as a new container) boots again, and a QEMU
// then killed with SIGKILL ends that one with 137 and reason QEMUKilled,
// the signal named in the message. Between the two, an attempt whose start
// fails ends with 128 and reason StartError, as on containerd.
func TestCrictlGuestPanics(t *testing.T) {
	n := newNode(t)
	ref := n.serveImage()
	n.start()
	n.must("pull", ref)
	podCfg, _ := n.configs(ref, n.cgroup)
	podID := strings.TrimSpace(n.must("runp", podCfg))

	panicking := n.ctrConfig("vm-panic.json", ref, 0, map[string]string{"vmpod.io/kernel-cmdline": "vmpod.test=panic"})
	id := strings.TrimSpace(n.must("create", podID, panicking, podCfg))
	n.must("start", id)
	n.waitLogs(id, "VMPOD-GUEST: panicking", 3*time.Minute)
	st := n.waitExited(id, time.Minute)
	if st.ExitCode != 2 || st.Reason != "GuestPanicked" || st.Message != "the guest kernel panicked" {
		t.Errorf("after a guest panic: %+v, want exit code 2, GuestPanicked", st)
	}
	logs := n.waitLogs(id, "vmpod: ", 10*time.Second)
	if !strings.Contains(logs, "Kernel panic - not syncing") {
		t.Errorf("the log has no kernel panic:\n%s", logs)
	}
	if got, want := lastLogLine(logs), "vmpod: the guest kernel panicked (GuestPanicked, exit status 2)"; got != want {
		t.Errorf("last log line %q, want %q", got, want)
	}

	// A start that fails (its disk overlay gone between create and start)
	// ends the container as containerd's CRI ends one: exit 128, reason
	// StartError, the error as the message; nothing of its VM stays, and
	// the next attempt is not refused for it.
	failing := n.ctrConfig("vm-fail.json", ref, 1, nil)
	idFail := strings.TrimSpace(n.must("create", podID, failing, podCfg))
	overlays, _ := filepath.Glob(filepath.Join(n.state, "pods", "*", "vm", "disk.qcow2"))
	if len(overlays) != 1 {
		t.Fatalf("disk overlays of the created VM: %v, want one", overlays)
	}
	if err := os.Remove(overlays[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := n.crictlRun(time.Minute, "start", idFail); err == nil {
		t.Fatal("a VM without its disk overlay started")
	}
	if st := n.inspect(idFail); st.State != "CONTAINER_EXITED" || st.ExitCode != 128 || st.Reason != "StartError" || st.Message == "" {
		t.Errorf("after a failed start: %+v, want exited, 128, StartError with the error", st)
	}
	if left, _ := filepath.Glob(filepath.Join(n.state, "pods", "*", "vm")); len(left) != 0 {
		t.Errorf("the VM that did not start left %v", left)
	}

	again := n.ctrConfig("vm-again.json", ref, 2, nil)
	id2 := strings.TrimSpace(n.must("create", podID, again, podCfg))
	n.must("start", id2)
	n.waitLogs(id2, "VMPOD-GUEST: init", 3*time.Minute)
	if err := syscall.Kill(n.qemuPID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	st = n.waitExited(id2, time.Minute)
	want := containerStatus{State: "CONTAINER_EXITED", ExitCode: 137, Reason: "QEMUKilled", Message: "QEMU was killed by SIGKILL"}
	if !testguest.KernelKeepsExitStatus() && st.Reason == "QEMUFailed" {
		t.Logf("after QEMU was killed: %+v (this kernel keeps no exit status with a pidfd)", st)
		want = st
	}
	if st != want {
		t.Errorf("after QEMU was killed: %+v, want %+v", st, want)
	}
	// The first attempt's log is still there (kubectl logs --previous).
	if logs := n.must("logs", id); !strings.Contains(logs, "Kernel panic - not syncing") {
		t.Errorf("the panicked attempt's log lost its panic:\n%s", logs)
	}

	n.must("rm", id, idFail, id2)
	n.must("stopp", podID)
	n.must("rmp", podID)
	n.must("rmi", ref)
	n.stop()
	n.assertNothingLeft()
}

// waitExited waits, bounded, for container id to be exited, and returns
// its status.
func (n *node) waitExited(id string, timeout time.Duration) containerStatus {
	n.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		st := n.inspect(id)
		if st.State == "CONTAINER_EXITED" {
			return st
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("container %s is %+v %v after its VM should have ended", id, st, timeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// lastLogLine is the last non-empty line of crictl logs' output.
func lastLogLine(logs string) string {
	lines := strings.Split(strings.TrimRight(logs, "\r\n"), "\n")
	return strings.TrimRight(lines[len(lines)-1], "\r")
}
