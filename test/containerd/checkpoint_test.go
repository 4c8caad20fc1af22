package containerd_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vmpod/vmpod/internal/ociarchive"
	"github.com/vmpod/vmpod/internal/testenv/ckptarchive"
	"github.com/vmpod/vmpod/internal/testenv/containerd"
	"github.com/vmpod/vmpod/internal/testguest"
	"github.com/vmpod/vmpod/pkg/checkpointimage"
	"github.com/vmpod/vmpod/pkg/vm"
)

// TestCrictlCheckpoint checkpoints a running VM pod through containerd's
// CRI (`crictl checkpoint`, the kubelet's checkpoint API's call): the
// archive holds the VM's state files under checkpoint/, flat, with the
// manifest's sums matching, next to containerd's own config and status
// dumps; the VM runs on in the same QEMU, its guest's counter going on.
// Made a checkpoint image and imported, the checkpoint restores the VM in
// a new pod once the first is gone: its counter and uptime go on.
func TestCrictlCheckpoint(t *testing.T) {
	state, err := os.MkdirTemp("/tmp", "vmpod-st-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(state) })
	key, trust := ckptarchive.SigningKeys(t, t.TempDir())
	c := containerd.Start(t, containerd.Options{
		ShimDir:  shimDir(t),
		VMDaemon: &containerd.VMDaemon{StateRoot: state, Args: []string{"--state-signing-key", key, "--state-trust-keys", trust}},
	})
	c.ImportImage(t, testguest.Archive(t))
	pod := c.NewPodConfig("ckpt", "default", "7e57-0c01", nil)
	podID := c.RunPod(t, pod, "vmpod")
	ip1 := c.InspectPod(t, podID).IP
	ctr := containerd.NewContainerConfig("vm", testguest.Image)
	ctr.Linux.Resources = containerd.Resources(1000, 256<<20)
	id := c.CreateContainer(t, podID, ctr, pod)
	c.MustCrictl(t, "start", id)
	waitLogs(t, c, id, "VMPOD-GUEST: ready", 3*time.Minute)
	pid := qemuPID(t, c, id)
	c.MustCrictl(t, "exec", "-s", id, "sh", "-c", ckptarchive.CounterScript)
	counter := func() int {
		t.Helper()
		out := c.MustCrictl(t, "exec", "-s", id, "cat", "/run/counter")
		n, err := strconv.Atoi(strings.TrimSpace(out))
		if err != nil {
			t.Fatalf("counter %q: %v", out, err)
		}
		return n
	}
	uptime := func(id string) float64 {
		t.Helper()
		f, err := strconv.ParseFloat(strings.Fields(c.MustCrictl(t, "exec", "-s", id, "cat", "/proc/uptime"))[0], 64)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	time.Sleep(time.Second)
	before, upBefore := counter(), uptime(id)

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

	// The checkpoint as an image (ctr images import), in a new pod: the
	// guest goes on where it was.
	base, err := testguest.OpenArchive(testguest.Archive(t), filepath.Join(t.TempDir(), "oci"))
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	img, err := checkpointimage.Build(base, archive, tmp, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	const restoreRef = "localhost/vmpod/test-guest:checkpoint"
	imgArchive := filepath.Join(tmp, "checkpoint.oci.tar")
	if err := ociarchive.Write(imgArchive, img, restoreRef, time.Unix(0, 0)); err != nil {
		t.Fatal(err)
	}
	c.ImportImage(t, imgArchive)
	pod2 := c.NewPodConfig("moved", "default", "7e57-0c02", nil)
	pod2ID := c.RunPod(t, pod2, "vmpod")
	ctr2 := containerd.NewContainerConfig("vm", restoreRef)
	ctr2.Linux.Resources = containerd.Resources(1000, 256<<20)
	id2 := c.CreateContainer(t, pod2ID, ctr2, pod2)
	start = time.Now()
	c.MustCrictl(t, "start", id2)
	for {
		if _, err := c.Crictl(t, "exec", "-s", id2, "true"); err == nil {
			break
		} else if time.Since(start) > 2*time.Minute {
			t.Fatalf("the restored guest's agent does not answer: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("restored: crictl start to the guest agent answering: %v", time.Since(start).Round(time.Millisecond))
	out := c.MustCrictl(t, "exec", "-s", id2, "cat", "/run/counter")
	if got, err := strconv.Atoi(strings.TrimSpace(out)); err != nil || got < before {
		t.Errorf("the restored guest's counter is %q, below the %d before the checkpoint: it started over", out, before)
	}
	if up := uptime(id2); up < upBefore {
		t.Errorf("the restored guest's uptime %.1f s is below the %.1f s before the checkpoint: it booted", up, upBefore)
	}
	// The guest leases the new pod's IP once vmpod has taken its link
	// down and up, and its HTTP server answers there from the node.
	ip2 := c.InspectPod(t, pod2ID).IP
	took := ckptarchive.WaitGuestIP(t, start, ip2, ip1, func() (string, error) {
		return c.Crictl(t, "exec", "-s", id2, "cat", "/run/ip")
	})
	t.Logf("restored: crictl start to the guest holding the new pod IP %s (it had %s): %v", ip2, ip1, took.Round(time.Millisecond))
	httpGet(t, c, ip2)

	// A third pod of the image beside the second, which holds the
	// checkpoint's domain and MAC: its guest takes its own pod's MAC and
	// IP, and both answer.
	pod3 := c.NewPodConfig("beside", "default", "7e57-0c03", nil)
	pod3ID := c.RunPod(t, pod3, "vmpod")
	id3 := c.CreateContainer(t, pod3ID, ctr2, pod3)
	start = time.Now()
	c.MustCrictl(t, "start", id3)
	ip3 := c.InspectPod(t, pod3ID).IP
	took = ckptarchive.WaitGuestIP(t, start, ip3, ip1, func() (string, error) {
		return c.Crictl(t, "exec", "-s", id3, "cat", "/run/ip")
	})
	t.Logf("restored beside: crictl start to the guest holding its pod IP %s: %v", ip3, took.Round(time.Millisecond))
	if mac, err := c.Crictl(t, "exec", "-s", id3, "cat", "/sys/class/net/eth0/address"); err != nil || strings.TrimSpace(mac) == m.MAC {
		t.Errorf("the guest restored beside has MAC %q (%v); want its pod's, not the checkpoint's %s", mac, err, m.MAC)
	}
	httpGet(t, c, ip2)
	httpGet(t, c, ip3)
	for _, p := range [][2]string{{id2, pod2ID}, {id3, pod3ID}} {
		c.MustCrictl(t, "stop", "--timeout", "30", p[0])
		c.MustCrictl(t, "rm", p[0])
		c.StopRemovePod(t, p[1])
	}
	if entries, _ := os.ReadDir(filepath.Join(state, "pods")); len(entries) > 0 {
		t.Errorf("pod state left: %v", entries)
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}
