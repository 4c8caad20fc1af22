package containerd_test

import (
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vmpod/vmpod/internal/testenv/containerd"
)

// daemonKilledPods is how many VM pods run while the node daemon is
// killed (issue 27: five).
const daemonKilledPods = 5

// TestDaemonKilledUnderPods: the node daemon is killed (SIGKILL) with
// five VM pods running and started again, as systemd's Restart=always
// does. Every pod stays running in the CRI with the same QEMU, exec works
// in each (the commands reach the guests through the new daemon), and
// each console goes on: a line a guest writes after the restart is in its
// container's log. The pods are then stopped (ACPI power-off, exit 0) and
// removed with nothing left.
func TestDaemonKilledUnderPods(t *testing.T) {
	n := startVMNode(t, "./cmd/containerd-shim-vmpod-v2", nil)
	pods := make([]*vmPod, daemonKilledPods)
	for i := range pods {
		pods[i] = n.newVMPod("killd", i, 128)
	}
	t.Cleanup(func() { n.removeAll(t, pods) })
	for _, p := range pods {
		n.run(t, p)
		n.c.MustCrictl(t, "start", p.ctr)
	}
	eachPod(t, pods, func(i int, p *vmPod) error { return waitExec(t, n.c, p.ctr, 5*time.Minute) })
	qemus := make([]int, len(pods))
	for i, p := range pods {
		qemus[i] = qemuPID(t, n.c, p.ctr)
	}

	n.c.KillDaemon(t, syscall.SIGKILL)
	for i, pid := range qemus {
		if !procRunning(pid) {
			t.Fatalf("pod %d: QEMU %d went with the node daemon", i, pid)
		}
	}
	n.c.StartDaemon(t)

	eachPod(t, pods, func(i int, p *vmPod) error {
		c := n.c
		if out, err := c.Crictl(t, "inspect", "-o", "go-template", "--template", "{{.status.state}} {{.info.pid}}", p.ctr); err != nil ||
			strings.TrimSpace(out) != fmt.Sprintf("CONTAINER_RUNNING %d", qemus[i]) {
			return fmt.Errorf("after the daemon's restart: state and pid %q (%v), want CONTAINER_RUNNING %d", out, err, qemus[i])
		}
		marker := fmt.Sprintf("VMPOD-TEST: pod %d after the daemon restart", i)
		out, err := c.Crictl(t, "exec", "-s", p.ctr, "sh", "-c", "echo '"+marker+"' >/dev/console; echo exec-"+fmt.Sprint(i))
		if err != nil || strings.TrimSpace(out) != fmt.Sprintf("exec-%d", i) {
			return fmt.Errorf("exec after the daemon's restart: %q, %v", out, err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			logs, _ := c.Crictl(t, "logs", p.ctr)
			if strings.Contains(logs, marker) {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("no %q in the container's log 30 s after the exec; its tail:\n%s", marker, lastLines([]byte(logs), 10))
			}
			time.Sleep(500 * time.Millisecond)
		}
	})

	eachPod(t, pods, func(i int, p *vmPod) error {
		if _, err := n.c.Crictl(t, "stop", "--timeout", "120", p.ctr); err != nil {
			return err
		}
		if out, err := n.c.Crictl(t, "inspect", "-o", "go-template", "--template", "{{.status.exitCode}}", p.ctr); err != nil || strings.TrimSpace(out) != "0" {
			return fmt.Errorf("exit code %q (%v) after the stop, want 0 (the guest powered off)", out, err)
		}
		return nil
	})
	n.removeAll(t, pods)
	for i, pid := range qemus {
		if procRunning(pid) {
			t.Errorf("pod %d: QEMU %d still runs after the pod's removal", i, pid)
		}
	}
	for _, p := range pods {
		assertNoPodLeft(t, p.cfg.Linux.CgroupParent, n.state)
	}
}

// eachPod runs f for every pod at once and fails the test with each
// pod's error.
func eachPod(t *testing.T, pods []*vmPod, f func(i int, p *vmPod) error) {
	t.Helper()
	errs := make([]error, len(pods))
	var wg sync.WaitGroup
	for i, p := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(i, p)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("pod %d (%s): %v", i, pods[i].ctr, err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

// waitExec waits until a command runs in the container's guest (its
// agent answers).
func waitExec(t *testing.T, c *containerd.Containerd, ctr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		out, err := c.Crictl(t, "exec", "-s", ctr, "echo", "up")
		if err == nil && strings.TrimSpace(out) == "up" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no exec in the guest within %v: %q, %v", timeout, out, err)
		}
		time.Sleep(2 * time.Second)
	}
}
