package containerd_test

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vmpod/vmpod/internal/testenv/containerd"
	"github.com/vmpod/vmpod/internal/testguest"
)

// TestCrictlVMPodContainerd17 drives a VM pod through containerd 1.7, which
// starts shims without the bootstrap protocol and speaks only task API v2:
// runp, create, start, logs (the serial console), the guest's HTTP on the
// pod IP and through crictl port-forward (a closed port ends the stream), a
// containerd restart (1.7 finds the shim again through the bundle's
// address file), stop (ACPI power-off, exit 0), removal, and nothing
// left: no QEMU or shim process, no pod netns, mount, cgroup, shim socket
// or state file.
func TestCrictlVMPodContainerd17(t *testing.T) {
	state, err := os.MkdirTemp("/tmp", "vmpod-st-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(state) })
	c := containerd.Start(t, containerd.Options{
		Release:  containerd.Containerd17,
		ShimDir:  shimDir(t),
		VMDaemon: &containerd.VMDaemon{StateRoot: state},
	})
	c.ImportImage(t, testguest.Archive(t))

	pod := c.NewPodConfig("guest17", "default", "7e57-0017", nil)
	podID := c.RunPod(t, pod, "vmpod")
	ps := c.InspectPod(t, podID)
	if ps.IP == "" {
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
	if !strings.Contains(logs, "VMPOD-GUEST: ip "+ps.IP+"/") {
		t.Errorf("the guest did not take the pod IP %s:\n%s", ps.IP, logs)
	}
	pid := qemuPID(t, c, id)
	shimPID := shimOf(t, podID)
	httpGet(t, c, ps.IP)
	checkPortForward(t, c, podID)

	c.Restart(t)
	if out := c.MustCrictl(t, "inspect", "-o", "go-template", "--template", "{{.status.state}}", id); strings.TrimSpace(out) != "CONTAINER_RUNNING" {
		t.Fatalf("after containerd restart the VM is %s", out)
	}
	if got := qemuPID(t, c, id); got != pid || syscall.Kill(pid, 0) != nil {
		t.Fatalf("after containerd restart QEMU is %d (alive: %v), want %d", got, syscall.Kill(pid, 0) == nil, pid)
	}
	httpGet(t, c, ps.IP)

	c.MustCrictl(t, "stop", "--timeout", "60", id)
	waitLogs(t, c, id, "VMPOD-GUEST: poweroff", 10*time.Second)
	if out := c.MustCrictl(t, "inspect", "-o", "go-template", "--template", "{{.status.exitCode}}", id); strings.TrimSpace(out) != "0" {
		t.Errorf("exit code %s after ACPI shutdown, want 0", out)
	}
	c.MustCrictl(t, "rm", id)
	c.StopRemovePod(t, podID)

	for _, p := range []int{pid, shimPID} {
		deadline := time.Now().Add(10 * time.Second)
		for p > 0 && syscall.Kill(p, 0) == nil && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		if p > 0 && syscall.Kill(p, 0) == nil {
			t.Errorf("process %d (QEMU %d, shim %d) still runs after the pod was removed", p, pid, shimPID)
		}
	}
	if out, err := c.Run(10*time.Second, "ls", "-A", ps.NetNSPath); err == nil {
		t.Errorf("pod netns %s still there: %s", ps.NetNSPath, out)
	}
	if mi, err := c.Run(10*time.Second, "cat", "/proc/self/mountinfo"); err != nil {
		t.Error(err)
	} else {
		for _, line := range strings.Split(mi, "\n") {
			if strings.Contains(line, podID) || strings.Contains(line, id) || strings.Contains(line, state) {
				t.Errorf("mount left in containerd's mount namespace: %s", line)
			}
		}
	}
	assertNoPodLeft(t, pod.Linux.CgroupParent, state)
}

// shimOf finds the pod's long-lived shim: `vm-runtime shim ... -id
// <sandbox id>` (QEMU is not its child: libvirt daemonizes it).
func shimOf(t *testing.T, sandboxID string) int {
	t.Helper()
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if len(args) < 2 || args[1] != "shim" || !slices.Contains(args, sandboxID) {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if err == nil {
			return pid
		}
	}
	t.Fatalf("no shim process for pod %s", sandboxID)
	return 0
}

// assertNoPodLeft checks, after a pod was removed, that no cgroup is left
// under its parent and the shim's state root holds no pod dir or socket.
func assertNoPodLeft(t testing.TB, cgroupParent, state string) {
	t.Helper()
	cgroups, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup/*", cgroupParent, "*"))
	for _, cg := range cgroups {
		if fi, err := os.Stat(cg); err == nil && fi.IsDir() {
			t.Errorf("cgroup left: %s", cg)
		}
	}
	for _, dir := range []string{"pods", "s"} {
		if entries, _ := os.ReadDir(filepath.Join(state, dir)); len(entries) > 0 {
			t.Errorf("left in the shim's state %s: %v", dir, entries)
		}
	}
}
