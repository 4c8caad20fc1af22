// Package containerd_test runs VM pods through real containerd 2.4.2
// (task API v3) and 1.7.35 (task API v2) and crictl with the vmpod runtime
// handler, as a kubelet would. The harness builds either containerd with
// its hack/containerd script when missing.
package containerd_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vmpod/vmpod/internal/testenv/containerd"
	"github.com/vmpod/vmpod/internal/testenv/repo"
	"github.com/vmpod/vmpod/internal/testguest"
)

// shimDir builds vm-runtime (and its jailer) and links it as containerd-shim-vmpod-v2 in a
// dir that goes first on containerd's PATH.
func shimDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "vm-runtime")
	repo.Build(t, dir, repo.NodeRuntime...)
	if err := os.Symlink(bin, filepath.Join(dir, "containerd-shim-vmpod-v2")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// waitLogs polls `crictl logs` until marker shows up.
func waitLogs(t testing.TB, c *containerd.Containerd, id, marker string, timeout time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var out string
	for time.Now().Before(deadline) {
		out, _ = c.Crictl(t, "logs", id)
		if strings.Contains(out, marker) {
			return out
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("no %q in crictl logs within %v:\n%s", marker, timeout, out)
	return ""
}

// httpGet asks the guest from the node's network namespace, a bounded
// number of times.
func httpGet(t *testing.T, c *containerd.Containerd, ip string) string {
	t.Helper()
	var out string
	var err error
	for i := 0; i < 10; i++ {
		out, err = c.Run(15*time.Second, "sh", "-c", "printf 'GET / HTTP/1.0\\r\\n\\r\\n' | busybox nc -w 5 "+ip+" 8080")
		if strings.Contains(out, "vmpod-guest") {
			return out
		}
		time.Sleep(time.Second)
	}
	t.Fatalf("no HTTP answer from the guest at %s:8080: %v\n%s", ip, err, out)
	return ""
}

func qemuPID(t testing.TB, c *containerd.Containerd, id string) int {
	t.Helper()
	out := c.MustCrictl(t, "inspect", "-o", "go-template", "--template", "{{.info.pid}}", id)
	pid, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		t.Fatalf("container pid %q: %v", out, err)
	}
	return pid
}

// TestCrictlVMPod drives a VM pod through containerd with crictl: runp
// with the vmpod handler, create, start, logs (the serial console), the
// guest's HTTP on the pod IP, a containerd restart that the pod survives,
// stop (ACPI power-off, exit 0) and removal, with nothing left behind.
func TestCrictlVMPod(t *testing.T) {
	// Short: QEMU's sockets go a few levels below it (108-byte limit).
	state, err := os.MkdirTemp("/tmp", "vmpod-st-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(state) })
	c := containerd.Start(t, containerd.Options{
		ShimDir:  shimDir(t),
		VMDaemon: &containerd.VMDaemon{StateRoot: state},
	})
	c.ImportImage(t, testguest.Archive(t))

	pod := c.NewPodConfig("guest", "default", "7e57-0001", nil)
	podID := c.RunPod(t, pod, "vmpod")
	ip := c.InspectPod(t, podID).IP
	if ip == "" {
		t.Fatalf("pod %s has no IP", podID)
	}
	ctr := containerd.NewContainerConfig("vm", testguest.Image)
	ctr.Linux.Resources = containerd.Resources(1000, 256<<20)
	id := c.CreateContainer(t, podID, ctr, pod)
	start := time.Now()
	c.MustCrictl(t, "start", id)
	waitLogs(t, c, id, "VMPOD-GUEST: init", 3*time.Minute)
	t.Logf("crictl start -> first serial line in crictl logs: %v", time.Since(start).Round(time.Millisecond))
	logs := waitLogs(t, c, id, "VMPOD-GUEST: ready", 2*time.Minute)
	if !strings.Contains(logs, "VMPOD-GUEST: ip "+ip+"/") {
		t.Errorf("the guest did not take the pod IP %s:\n%s", ip, logs)
	}
	pid := qemuPID(t, c, id)
	httpGet(t, c, ip)

	// An exec that times out (an exec probe's timeoutSeconds): containerd
	// kills it and waits, and the shim kills the command in the guest,
	// with the children it started, first, so pgrep (which leaves itself
	// out) finds neither the shell nor a sleep: exit 1.
	if _, err := c.Crictl(t, "exec", "-s", "--timeout", "2", id, "sh", "-c", "sleep 121 & sleep 122 & wait"); err == nil {
		t.Errorf("crictl exec -s --timeout 2 sh -c 'sleep 121 & sleep 122 & wait' succeeded, want the timeout")
	}
	if out, err := c.Crictl(t, "exec", "-s", id, "pgrep", "-f", "sleep 12[12]"); err == nil || !strings.Contains(err.Error(), "exit") || !strings.Contains(err.Error(), " 1") {
		t.Errorf("pgrep -f 'sleep 12[12]' after the exec timed out: %q, %v; want exit 1, the command and its children gone from the guest", out, err)
	}

	// containerd restarts; the shim and the VM run on and containerd
	// reconnects to them.
	c.Restart(t)
	if out := c.MustCrictl(t, "inspect", "-o", "go-template", "--template", "{{.status.state}}", id); strings.TrimSpace(out) != "CONTAINER_RUNNING" {
		t.Fatalf("after containerd restart the VM is %s", out)
	}
	if got := qemuPID(t, c, id); got != pid || syscall.Kill(pid, 0) != nil {
		t.Fatalf("after containerd restart QEMU is %d (alive: %v), want %d", got, syscall.Kill(pid, 0) == nil, pid)
	}
	httpGet(t, c, ip)

	// crictl stop sends SIGTERM: the ACPI power button.
	c.MustCrictl(t, "stop", "--timeout", "60", id)
	logs = waitLogs(t, c, id, "VMPOD-GUEST: poweroff", 10*time.Second)
	if out := c.MustCrictl(t, "inspect", "-o", "go-template", "--template", "{{.status.exitCode}}", id); strings.TrimSpace(out) != "0" {
		t.Errorf("exit code %s after ACPI shutdown, want 0", out)
	}
	c.MustCrictl(t, "rm", id)
	c.StopRemovePod(t, podID)

	deadline := time.Now().Add(10 * time.Second)
	for syscall.Kill(pid, 0) == nil && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if syscall.Kill(pid, 0) == nil {
		t.Errorf("QEMU %d still runs after the pod was removed", pid)
	}
	if entries, _ := os.ReadDir(filepath.Join(state, "pods")); len(entries) > 0 {
		t.Errorf("pod state left: %v", entries)
	}
}
