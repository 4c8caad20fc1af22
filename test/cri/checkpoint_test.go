package cri_test

import (
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vmpod/vmpod/internal/testenv/ckptarchive"
	"github.com/vmpod/vmpod/pkg/vm"
)

// TestCrictlCheckpoint: on a VM-only node `crictl checkpoint` (the
// kubelet's checkpoint API's call) writes an archive in containerd's and
// CRI-O's layout, the VM's state under checkpoint/ with the sums its
// manifest gives, and the VM runs on in the same QEMU, its guest's
// counter going on. A stopped container is refused, and nothing of it is
// written.
func TestCrictlCheckpoint(t *testing.T) {
	n := newNode(t)
	ref := n.serveImage()
	n.start()
	n.must("pull", ref)
	podCfg, ctrCfg := n.configs(ref, n.cgroup)
	podID := strings.TrimSpace(n.must("runp", podCfg))
	id := strings.TrimSpace(n.must("create", podID, ctrCfg, podCfg))
	n.must("start", id)
	n.waitLogs(id, "VMPOD-GUEST: ready", 3*time.Minute)
	pid := n.qemuPID()
	n.must("exec", "-s", id, "sh", "-c",
		`setsid sh -c 'i=0; while :; do i=$((i+1)); echo $i > /run/counter; sleep 0.1; done' </dev/null >/dev/null 2>&1 &`)
	counter := func() int {
		t.Helper()
		out := n.must("exec", "-s", id, "cat", "/run/counter")
		c, err := strconv.Atoi(strings.TrimSpace(out))
		if err != nil {
			t.Fatalf("counter %q: %v", out, err)
		}
		return c
	}
	time.Sleep(time.Second)
	before := counter()

	archive := filepath.Join(t.TempDir(), "checkpoint.tar")
	start := time.Now()
	n.must("checkpoint", "--export="+archive, id)
	t.Logf("crictl checkpoint: %v", time.Since(start).Round(time.Millisecond))
	m := ckptarchive.Check(t, archive)
	if _, ok := m.Files[vm.CheckpointDisk]; !ok {
		t.Errorf("the checkpoint has no disk overlay: %+v", m.Files)
	}
	t.Logf("guest paused %v", m.Paused)

	if st := n.inspect(id); st.State != "CONTAINER_RUNNING" {
		t.Fatalf("after the checkpoint the VM is %+v", st)
	}
	if got := n.qemuPID(); got != pid || syscall.Kill(pid, 0) != nil {
		t.Errorf("after the checkpoint QEMU is %d, want %d: the same process", got, pid)
	}
	deadline := time.Now().Add(30 * time.Second)
	for counter() <= before+5 {
		if time.Now().After(deadline) {
			t.Fatalf("the guest's counter stays near %d after the checkpoint", before)
		}
		time.Sleep(200 * time.Millisecond)
	}

	n.must("stop", "--timeout", "30", id)
	refused := filepath.Join(t.TempDir(), "refused.tar")
	if out, err := n.crictlRun(time.Minute, "checkpoint", "--export="+refused, id); err == nil || !strings.Contains(out+err.Error(), "only a running container") {
		t.Errorf("a checkpoint of a stopped container: %q, %v; want it refused", out, err)
	}
	if left, _ := filepath.Glob(refused + "*"); len(left) > 0 {
		t.Errorf("a refused checkpoint left %v", left)
	}
	n.must("rm", id)
	n.must("stopp", podID)
	n.must("rmp", podID)
	n.must("rmi", ref)
	n.stop()
	n.assertNothingLeft()
}
