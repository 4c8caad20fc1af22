package containerd_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vmpod/vmpod/internal/testenv/ckptarchive"
	"github.com/vmpod/vmpod/internal/testenv/containerd"
	"github.com/vmpod/vmpod/internal/testguest"
	"github.com/vmpod/vmpod/pkg/vm"
)

// TestCrictlCheckpoint checkpoints a running VM pod through containerd's
// CRI (`crictl checkpoint`, the kubelet's checkpoint API's call): the
// archive holds the VM's state files under checkpoint/, flat, with the
// manifest's sums matching, next to containerd's own config and status
// dumps; the VM runs on in the same QEMU, its guest's counter going on.
func TestCrictlCheckpoint(t *testing.T) {
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
	pod := c.NewPodConfig("ckpt", "default", "7e57-0c01", nil)
	podID := c.RunPod(t, pod, "vmpod")
	ctr := containerd.NewContainerConfig("vm", testguest.Image)
	ctr.Linux.Resources = containerd.Resources(1000, 256<<20)
	id := c.CreateContainer(t, podID, ctr, pod)
	c.MustCrictl(t, "start", id)
	waitLogs(t, c, id, "VMPOD-GUEST: ready", 3*time.Minute)
	pid := qemuPID(t, c, id)
	c.MustCrictl(t, "exec", "-s", id, "sh", "-c",
		`setsid sh -c 'i=0; while :; do i=$((i+1)); echo $i > /run/counter; sleep 0.1; done' </dev/null >/dev/null 2>&1 &`)
	counter := func() int {
		t.Helper()
		out := c.MustCrictl(t, "exec", "-s", id, "cat", "/run/counter")
		n, err := strconv.Atoi(strings.TrimSpace(out))
		if err != nil {
			t.Fatalf("counter %q: %v", out, err)
		}
		return n
	}
	time.Sleep(time.Second)
	before := counter()

	archive := filepath.Join(t.TempDir(), "checkpoint.tar")
	start := time.Now()
	c.MustCrictl(t, "checkpoint", "--export="+archive, id)
	t.Logf("crictl checkpoint: %v", time.Since(start).Round(time.Millisecond))

	m := ckptarchive.Check(t, archive)
	if _, ok := m.Files[vm.CheckpointDisk]; !ok {
		t.Errorf("the checkpoint has no disk overlay: %+v", m.Files)
	}
	t.Logf("archive: %d bytes; guest paused %v", fileSize(t, archive), m.Paused)

	if out := c.MustCrictl(t, "inspect", "-o", "go-template", "--template", "{{.status.state}}", id); strings.TrimSpace(out) != "CONTAINER_RUNNING" {
		t.Fatalf("after the checkpoint the VM is %s", out)
	}
	if got := qemuPID(t, c, id); got != pid || syscall.Kill(pid, 0) != nil {
		t.Errorf("after the checkpoint QEMU is %d, want %d: the same process", got, pid)
	}
	deadline := time.Now().Add(30 * time.Second)
	for counter() <= before+5 {
		if time.Now().After(deadline) {
			t.Fatalf("the guest's counter stays near %d after the checkpoint", before)
		}
		time.Sleep(200 * time.Millisecond)
	}

	c.MustCrictl(t, "stop", "--timeout", "30", id)
	c.MustCrictl(t, "rm", id)
	c.StopRemovePod(t, podID)
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}
