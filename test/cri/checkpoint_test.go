package cri_test

import (
	"io"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/vmpod/vmpod/internal/testenv/ckptarchive"
	"github.com/vmpod/vmpod/internal/testguest"
	"github.com/vmpod/vmpod/pkg/checkpointimage"
	"github.com/vmpod/vmpod/pkg/vm"
)

// TestCrictlCheckpoint: on a VM-only node `crictl checkpoint` (the
// kubelet's checkpoint API's call) writes an archive in containerd's and
// CRI-O's layout, the VM's state under checkpoint/ with the sums its
// manifest gives, and the VM runs on in the same QEMU, its guest's
// counter going on. A stopped container is refused, and nothing of it is
// written. The archive, made a checkpoint image (pkg/checkpointimage),
// restores the VM in a new pod once the first is gone: the guest's
// counter and uptime go on, the new pod's interface has the guest's MAC,
// and the guest leases the new pod's IP and answers on it; the same image
// without the node's signature is refused. A third pod of the image,
// beside the second, runs the same guest with its own MAC and IP.
func TestCrictlCheckpoint(t *testing.T) {
	n, ref, podID, id, ip1 := startCounting(t)
	pid := n.qemuPID()
	counter := func() int {
		t.Helper()
		out := n.must("exec", "-s", id, "cat", "/run/counter")
		c, err := strconv.Atoi(strings.TrimSpace(out))
		if err != nil {
			t.Fatalf("counter %q: %v", out, err)
		}
		return c
	}
	uptime := func(id string) float64 {
		t.Helper()
		f, err := strconv.ParseFloat(strings.Fields(n.must("exec", "-s", id, "cat", "/proc/uptime"))[0], 64)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	time.Sleep(time.Second)
	before, upBefore := counter(), uptime(id)

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

	// A stopped container is refused, writing nothing.
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

	// The checkpoint as an image, restored in a new pod: the guest goes
	// on (its counter and uptime), with the checkpoint's MAC on the new
	// pod's interface. Unsigned, it is refused.
	base, err := testguest.OpenArchive(testguest.Archive(t), filepath.Join(n.dir, "oci-base"))
	if err != nil {
		t.Fatal(err)
	}
	img, err := checkpointimage.Build(base, archive, t.TempDir(), time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	restoreRef := n.pushImage(img, "vmpod/test-guest:checkpoint")
	unsigned, err := checkpointimage.Build(base, ckptarchive.Without(t, archive, "checkpoint/"+vm.CheckpointSignature), t.TempDir(), time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	unsignedRef := n.pushImage(unsigned, "vmpod/test-guest:unsigned")
	n.must("pull", restoreRef)
	n.must("pull", unsignedRef)
	pod2 := n.namedPod("moved", "7e57-c41-0c02")
	pod2ID := strings.TrimSpace(n.must("runp", pod2))
	bad := n.ctrConfig("vm-unsigned.json", unsignedRef, 0, nil)
	if out, err := n.crictlRun(time.Minute, "create", pod2ID, bad, pod2); err == nil || !strings.Contains(out+err.Error(), "not signed") {
		t.Errorf("a container of an unsigned checkpoint image: %q, %v; want it refused as not signed", out, err)
	}
	restored := n.ctrConfig("vm-restored.json", restoreRef, 0, nil)
	id2 := strings.TrimSpace(n.must("create", pod2ID, restored, pod2))
	start = time.Now()
	n.must("start", id2)
	t.Logf("restored: crictl start to the guest agent answering: %v", n.waitAgent(id2, start).Round(time.Millisecond))
	counter2 := func() int {
		t.Helper()
		c, err := strconv.Atoi(strings.TrimSpace(n.must("exec", "-s", id2, "cat", "/run/counter")))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	if c := counter2(); c < before {
		t.Errorf("the restored guest's counter is at %d, below the %d before the checkpoint: it started over", c, before)
	}
	if up := uptime(id2); up < upBefore {
		t.Errorf("the restored guest's uptime %.1f s is below the %.1f s before the checkpoint: it booted", up, upBefore)
	}
	first := counter2()
	time.Sleep(time.Second)
	if next := counter2(); next <= first {
		t.Errorf("the restored guest's counter stands at %d", next)
	}
	if mac := n.podMAC(pod2ID); mac != m.MAC {
		t.Errorf("the new pod's interface has MAC %s, want the checkpoint's %s", mac, m.MAC)
	}
	// The new pod's address: the guest leases it once vmpod has taken its
	// link down and up, and its HTTP server answers on it from the node.
	ip2 := n.podIP(pod2ID)
	took := ckptarchive.WaitGuestIP(t, start, ip2, ip1, func() (string, error) {
		return n.crictlRun(10*time.Second, "exec", "-s", id2, "cat", "/run/ip")
	})
	t.Logf("restored: crictl start to the guest holding the new pod IP %s (it had %s): %v", ip2, ip1, took.Round(time.Millisecond))
	if reply, err := httpIn(n.nsPath, ip2+":8080"); err != nil || !strings.HasPrefix(reply, "HTTP/1.0 200 OK") {
		t.Errorf("HTTP GET of the restored guest on the new pod IP %s: %q, %v; want 200", ip2, reply, err)
	}

	// A third pod of the same image on the node, while the second holds
	// the checkpoint's domain and MAC: restored beside it, its guest
	// takes its own pod's MAC (the pod interface keeps the one CNI gave
	// it) and IP, and both guests answer, each on its own address.
	pod3 := n.namedPod("beside", "7e57-c41-0c03")
	pod3ID := strings.TrimSpace(n.must("runp", pod3))
	mac3 := n.podMAC(pod3ID)
	id3 := strings.TrimSpace(n.must("create", pod3ID, n.ctrConfig("vm-beside.json", restoreRef, 0, nil), pod3))
	start = time.Now()
	n.must("start", id3)
	t.Logf("restored beside: crictl start to the guest agent answering: %v", n.waitAgent(id3, start).Round(time.Millisecond))
	if mac := n.podMAC(pod3ID); mac != mac3 || mac == m.MAC {
		t.Errorf("the third pod's interface has MAC %s; want its own %s, not the checkpoint's %s", mac, mac3, m.MAC)
	}
	if mac := strings.TrimSpace(n.must("exec", "-s", id3, "cat", "/sys/class/net/eth0/address")); mac != mac3 {
		t.Errorf("the guest restored beside has MAC %s; want its pod's %s", mac, mac3)
	}
	ip3 := n.podIP(pod3ID)
	took = ckptarchive.WaitGuestIP(t, start, ip3, ip1, func() (string, error) {
		return n.crictlRun(10*time.Second, "exec", "-s", id3, "cat", "/run/ip")
	})
	t.Logf("restored beside: crictl start to the guest holding its pod IP %s: %v", ip3, took.Round(time.Millisecond))
	if c, err := strconv.Atoi(strings.TrimSpace(n.must("exec", "-s", id3, "cat", "/run/counter"))); err != nil || c < before {
		t.Errorf("the counter of the guest restored beside is %d (%v), below the %d before the checkpoint", c, err, before)
	}
	for _, ip := range []string{ip2, ip3} {
		if reply, err := httpIn(n.nsPath, ip+":8080"); err != nil || !strings.HasPrefix(reply, "HTTP/1.0 200 OK") {
			t.Errorf("HTTP GET of %s with both restored guests running: %q, %v; want 200", ip, reply, err)
		}
	}

	n.removePod(id2, pod2ID)
	n.removePod(id3, pod3ID)
	n.must("rmi", ref, restoreRef, unsignedRef)
	n.stop()
	n.assertNothingLeft()
}

// namedPod writes the config of a pod name (namespace default, uid uid)
// in the node's cgroup and returns its path.
func (n *node) namedPod(name, uid string) string {
	return n.writeJSON("pod-"+name+".json", map[string]any{
		"metadata":      map[string]any{"name": name, "namespace": "default", "uid": uid, "attempt": 0},
		"hostname":      name,
		"log_directory": filepath.Join(n.dir, "logs", name),
		"linux":         map[string]any{"cgroup_parent": n.cgroup},
	})
}

// podMAC is the MAC of the pod's interface, in its network namespace.
func (n *node) podMAC(podID string) string {
	n.t.Helper()
	mac, err := inNetns(n.podNetns(podID), func() (string, error) {
		l, err := netlink.LinkByName("eth0")
		if err != nil {
			return "", err
		}
		return l.Attrs().HardwareAddr.String(), nil
	})
	if err != nil {
		n.t.Fatal(err)
	}
	return mac
}

// podIP is the pod's IP, as the server reports it.
func (n *node) podIP(podID string) string {
	var pod struct {
		Status struct{ Network struct{ IP string } }
	}
	n.mustJSON(&pod, "inspectp", podID)
	if pod.Status.Network.IP == "" {
		n.t.Fatalf("pod %s has no IP", podID)
	}
	return pod.Status.Network.IP
}

// httpIn is the reply to one HTTP GET of / at addr, from the network
// namespace at path; bounded.
func httpIn(path, addr string) (string, error) {
	conn, err := inNetns(path, func() (net.Conn, error) { return net.DialTimeout("tcp", addr, 30*time.Second) })
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(time.Minute)); err != nil {
		return "", err
	}
	if _, err := io.WriteString(conn, "GET / HTTP/1.0\r\n\r\n"); err != nil {
		return "", err
	}
	reply, err := io.ReadAll(io.LimitReader(conn, 64<<10))
	return string(reply), err
}

// startCounting starts a node whose checkpoints are signed and trusted,
// and on it a VM pod of the test guest running ckptarchive.CounterScript:
// the image's ref, the pod's and container's ids and the pod's IP.
func startCounting(t *testing.T) (n *node, ref, podID, id, ip string) {
	n = newNode(t)
	ref = n.serveImage()
	key, trust := ckptarchive.SigningKeys(t, n.dir)
	n.serverArgs = []string{"--state-signing-key", key, "--state-trust-keys", trust}
	n.start()
	n.must("pull", ref)
	podCfg, ctrCfg := n.configs(ref, n.cgroup)
	podID = strings.TrimSpace(n.must("runp", podCfg))
	ip = n.podIP(podID)
	id = strings.TrimSpace(n.must("create", podID, ctrCfg, podCfg))
	n.must("start", id)
	n.waitLogs(id, "VMPOD-GUEST: ready", 3*time.Minute)
	n.must("exec", "-s", id, "sh", "-c", ckptarchive.CounterScript)
	return n, ref, podID, id, ip
}

// waitAgent waits, up to two minutes from start, until the guest agent of
// container id answers an exec, and returns how long after start it did.
func (n *node) waitAgent(id string, start time.Time) time.Duration {
	n.t.Helper()
	for {
		_, err := n.crictlRun(10*time.Second, "exec", "-s", id, "true")
		if err == nil {
			return time.Since(start)
		}
		if time.Since(start) > 2*time.Minute {
			n.t.Fatalf("the restored guest's agent does not answer: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
