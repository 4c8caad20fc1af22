// Package cri_test drives `vm-runtime cri` with crictl, as a kubelet on a
// VM-only node would: the server runs in a network namespace the test
// made (the node's: the CNI bridge and pod IPs live there), pulls the test
// guest's containerdisk from a registry the test serves on that
// namespace's loopback, and runs it as a pod.
package cri_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/vmpod/vmpod/internal/testenv/repo"
	"github.com/vmpod/vmpod/internal/testguest"
)

// crictlVersion is the cri-tools release hack/containerd/install.sh pins.
const crictlVersion = "v1.37.0"

// node is the test's node: a network namespace, a state root, and
// vm-runtime cri serving in them.
type node struct {
	t       *testing.T
	name    string // of the netns, for ip -n
	nsPath  string
	dir     string // everything else of the test
	state   string
	socket  string
	crictl  string
	cgroup  string // the pods' cgroup parent
	bin     string
	server  *exec.Cmd
	logPath string
	// serverArgs are more flags for vm-runtime cri.
	serverArgs []string
	// registry and pushHost are the test registry's host:port in the
	// node's namespace and in the test's (serveImage).
	registry, pushHost string
}

func TestCrictlVMPod(t *testing.T) {
	n := newNode(t)
	ref := n.serveImage()
	n.serverArgs = []string{"--max-sessions-per-pod", strconv.Itoa(sessionsPerPod)}
	n.start()

	n.must("version")
	// The kubelet takes the node's cgroup driver from the runtime:
	// systemd where systemd is the init system, cgroupfs elsewhere.
	driver := "CGROUPFS"
	if fi, err := os.Stat("/run/systemd/system"); err == nil && fi.IsDir() {
		driver = "SYSTEMD"
	}
	if out := n.must("runtime-config"); !strings.Contains(out, driver) {
		t.Errorf("crictl runtime-config = %q, want the %s driver", out, driver)
	}
	n.must("pull", ref)
	if out := n.must("images", "-o", "json"); !strings.Contains(out, ref) {
		t.Fatalf("crictl images does not list %s:\n%s", ref, out)
	}

	// As critest does: no cgroup_parent; the server's default parent
	// (the test's cgroup here) gets a pod cgroup.
	podCfg, ctrCfg := n.configs(ref, "")
	podID := strings.TrimSpace(n.must("runp", podCfg))
	var podStatus struct {
		Status struct {
			State   string
			Network struct{ IP string }
		}
	}
	n.mustJSON(&podStatus, "inspectp", podID)
	if podStatus.Status.State != "SANDBOX_READY" || !strings.HasPrefix(podStatus.Status.Network.IP, "10.88.") {
		t.Fatalf("pod %s: %+v, want ready with an IP of 10.88.0.0/16", podID, podStatus.Status)
	}

	id := strings.TrimSpace(n.must("create", podID, ctrCfg, podCfg))
	start := time.Now()
	n.must("start", id)
	n.waitLogs(id, "VMPOD-GUEST: init", 3*time.Minute)
	t.Logf("crictl start -> first serial line in crictl logs: %v", time.Since(start).Round(time.Millisecond))
	logs := n.waitLogs(id, "VMPOD-GUEST: ready", 2*time.Minute)
	if !strings.Contains(logs, "VMPOD-GUEST: ip "+podStatus.Status.Network.IP+"/") {
		t.Errorf("the guest did not take the pod IP %s:\n%s", podStatus.Status.Network.IP, logs)
	}
	n.checkLogFormat(filepath.Join(n.dir, "logs", "pod", "vm", "0.log"))
	if !strings.Contains(logs, "VMPOD-GUEST: qemu-ga ready") {
		t.Fatalf("the guest agent did not start:\n%s", logs)
	}
	// QEMU has the container's oom_score_adj, not the server's.
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/oom_score_adj", n.qemuPID())); err != nil ||
		strings.TrimSpace(string(b)) != strconv.Itoa(burstableOOMScoreAdj) {
		t.Errorf("QEMU's oom_score_adj = %q, %v; want the container's %d", b, err, burstableOOMScoreAdj)
	}

	n.assertVMNetns(podID)

	n.checkExecSync(id)
	n.checkExec(id)
	n.checkSessions(id)
	n.checkAttach(id)
	n.checkPortForward(podID)
	n.checkStats(id, podID)
	n.checkUpdate(id, podID)

	waiting := n.execInFlight(id)
	n.must("stop", "--timeout", "60", id)
	n.waitLogs(id, "VMPOD-GUEST: poweroff", 10*time.Second)
	waiting()
	if st := n.inspect(id); st.State != "CONTAINER_EXITED" || st.ExitCode != 0 {
		t.Errorf("after ACPI shutdown: %+v, want exited 0", st)
	}
	n.must("rm", id)
	n.must("stopp", podID)
	n.must("rmp", podID)
	n.must("rmi", ref)
	if out := n.must("images", "-q"); strings.TrimSpace(out) != "" {
		t.Errorf("images left after rmi:\n%s", out)
	}
	n.assertThreadsInNodeNetns()
	n.stop()
	n.assertNothingLeft()
}

// assertThreadsInNodeNetns: every thread of the server is in the node's
// network namespace once the pod is gone. A thread left in a pod's
// namespace keeps that namespace alive, and whatever it runs later runs
// there: libvirt starts a domain's threads (its event thread, and its one
// qemu-event worker with the first event) from the thread that starts
// the domain, so no libvirt call may run in a pod's namespace.
func (n *node) assertThreadsInNodeNetns() {
	t := n.t
	pid := n.server.Process.Pid
	want, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		t.Fatal(err)
	}
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		ns, err := os.Readlink(fmt.Sprintf("/proc/%d/task/%s/ns/net", pid, task.Name()))
		if err != nil {
			continue // the thread exited
		}
		if ns != want {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/comm", pid, task.Name()))
			t.Errorf("thread %s (%s) of vm-runtime cri is in %s after its pod went, not the node's %s",
				task.Name(), strings.TrimSpace(string(b)), ns, want)
		}
	}
}

// podNetns is the network namespace of the pod podID (the server's
// --netns-dir).
func (n *node) podNetns(podID string) string { return filepath.Join(n.dir, "netns", podID[:16]) }

// assertVMNetns: the running VM of pod podID is in the pod's network
// namespace, QEMU and its tap, and nothing of it in the node's.
func (n *node) assertVMNetns(podID string) {
	t := n.t
	var pod, qemu unix.Stat_t
	if err := unix.Stat(n.podNetns(podID), &pod); err != nil {
		t.Fatal(err)
	}
	if err := unix.Stat(fmt.Sprintf("/proc/%d/ns/net", n.qemuPID()), &qemu); err != nil {
		t.Fatal(err)
	}
	if pod.Ino != qemu.Ino || pod.Dev != qemu.Dev {
		t.Errorf("QEMU is in network namespace %d, not the pod's %d", qemu.Ino, pod.Ino)
	}
	if taps := tapsIn(t, n.podNetns(podID)); len(taps) != 1 {
		t.Errorf("taps in the pod's network namespace: %v, want the guest's one", taps)
	}
	if taps := tapsIn(t, n.nsPath); len(taps) != 0 {
		t.Errorf("taps in the node's network namespace: %v, want none (each moves into its pod's)", taps)
	}
}

// tapsIn names the taps in the network namespace at path.
func tapsIn(t *testing.T, path string) []string {
	t.Helper()
	ns, err := netns.GetFromPath(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	links, err := h.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	var taps []string
	for _, l := range links {
		if _, ok := l.(*netlink.Tuntap); ok {
			taps = append(taps, l.Attrs().Name)
		}
	}
	return taps
}

// configs are the pod and container configs of the test guest pod, as
// files for crictl, with the image ref and the pod's cgroup parent ("":
// none).
func (n *node) configs(ref, cgroupParent string) (pod, ctr string) {
	linux := map[string]any{}
	if cgroupParent != "" {
		linux["cgroup_parent"] = cgroupParent
	}
	pod = n.writeJSON("pod.json", map[string]any{
		"metadata":      map[string]any{"name": "guest", "namespace": "default", "uid": "7e57-c41-0001", "attempt": 0},
		"hostname":      "guest",
		"log_directory": filepath.Join(n.dir, "logs", "pod"),
		"dns_config":    map[string]any{"servers": []string{"10.96.0.10"}, "searches": []string{"default.svc.cluster.local"}},
		"linux":         linux,
	})
	return pod, n.ctrConfig("vm.json", ref, 0, nil)
}

// ctrConfig is the test guest's container config, as a file for crictl:
// attempt as the kubelet counts restarts (the log is vm/<attempt>.log),
// with annotations (nil: none).
func (n *node) ctrConfig(file, ref string, attempt int, annotations map[string]string) string {
	return n.writeJSON(file, map[string]any{
		"metadata":    map[string]any{"name": "vm", "attempt": attempt},
		"image":       map[string]any{"image": ref},
		"log_path":    fmt.Sprintf("vm/%d.log", attempt),
		"annotations": annotations,
		"linux": map[string]any{"resources": map[string]any{
			"memory_limit_in_bytes": 256 << 20, "cpu_period": 100000, "cpu_quota": 100000, "cpu_shares": 1024,
			"oom_score_adj": burstableOOMScoreAdj}},
	})
}

// burstableOOMScoreAdj is an oom_score_adj the kubelet gives a Burstable
// pod's container (2..999), unlike what QEMU would inherit from the
// server.
const burstableOOMScoreAdj = 500

// TestCrictlServerRestart: a server killed (SIGKILL) while its VM runs
// leaves checkpoints; the next one takes the VM over: the container is
// still running, in the same QEMU; its log goes on after what it held,
// nothing repeated; exec and port-forward reach the guest, and the
// guest's DHCP server answers again; stop shuts the guest down with ACPI
// (exit 0); and the pod goes with nothing left.
func TestCrictlServerRestart(t *testing.T) {
	n := newNode(t)
	ref := n.serveImage()
	n.start()
	n.must("pull", ref)
	podCfg, ctrCfg := n.configs(ref, n.cgroup)
	podID := strings.TrimSpace(n.must("runp", podCfg))
	var podStatus struct {
		Status struct {
			State   string
			Network struct{ IP string }
		}
	}
	n.mustJSON(&podStatus, "inspectp", podID)
	id := strings.TrimSpace(n.must("create", podID, ctrCfg, podCfg))
	n.must("start", id)
	if logs := n.waitLogs(id, "VMPOD-GUEST: ready", 4*time.Minute); !strings.Contains(logs, "VMPOD-GUEST: qemu-ga ready") {
		t.Fatalf("the guest agent did not start:\n%s", logs)
	}
	n.must("exec", "-s", id, "sh", "-c", "echo VMPOD-BEFORE-RESTART >/dev/console")
	n.waitLogs(id, "VMPOD-BEFORE-RESTART", time.Minute)
	pid := n.qemuPID()

	n.kill()
	n.start()

	st := n.inspect(id)
	if st.State != "CONTAINER_RUNNING" {
		t.Fatalf("after a server restart: %+v, want running", st)
	}
	if out := n.must("ps", "-q", "--state", "running"); !strings.Contains(out, id) {
		t.Errorf("crictl ps --state running after a restart does not list %s:\n%s", id, out)
	}
	var pod struct{ Status struct{ State string } }
	n.mustJSON(&pod, "inspectp", podID)
	if pod.Status.State != "SANDBOX_READY" {
		t.Errorf("after a server restart the pod is %s, want ready", pod.Status.State)
	}
	if got := n.qemuPID(); got != pid {
		t.Errorf("QEMU's pid after the restart is %d, want %d (the same QEMU)", got, pid)
	}
	if err := syscall.Kill(pid, 0); err != nil {
		t.Errorf("QEMU %d after the restart: %v", pid, err)
	}

	// The console goes on into the same log.
	n.must("exec", "-s", id, "sh", "-c", "echo VMPOD-AFTER-RESTART >/dev/console")
	logs := n.waitLogs(id, "VMPOD-AFTER-RESTART", time.Minute)
	for _, marker := range []string{"VMPOD-GUEST: init", "VMPOD-GUEST: ready", "VMPOD-BEFORE-RESTART"} {
		if c := strings.Count(logs, marker); c != 1 {
			t.Errorf("crictl logs after the restart has %q %d times, want once:\n%s", marker, c, logs)
		}
	}
	if strings.Index(logs, "VMPOD-BEFORE-RESTART") > strings.Index(logs, "VMPOD-AFTER-RESTART") {
		t.Errorf("crictl logs after the restart: the earlier output is not before the new:\n%s", logs)
	}
	n.checkLogFormat(filepath.Join(n.dir, "logs", "pod", "vm", "0.log"))

	// Exec through the streaming server; the guest's DHCP server (in the
	// server's process) answers a new request with the pod IP; the guest
	// answers on the pod IP.
	stdout, stderr, err := n.crictlIO("", "exec", id, "sh", "-c", "echo out-after-restart")
	if err != nil || strings.TrimSpace(stdout) != "out-after-restart" {
		t.Errorf("crictl exec after the restart: %q, %v (stderr %q)", stdout, err, stderr)
	}
	out, err := n.crictlRun(time.Minute, "exec", "-s", id, "sh", "-c",
		"udhcpc -i eth0 -s /etc/udhcpc.script -f -q -n -t 5 -T 1 >/run/udhcpc-again.log 2>&1 && cat /run/ip")
	if err != nil || !strings.HasPrefix(strings.TrimSpace(out), podStatus.Status.Network.IP+"/") {
		t.Errorf("DHCP in the guest after the restart: %q, %v; want the pod IP %s", out, err, podStatus.Status.Network.IP)
	}
	n.checkPortForward(podID)

	n.must("stop", "--timeout", "60", id)
	n.waitLogs(id, "VMPOD-GUEST: poweroff", 10*time.Second)
	if st = n.inspect(id); st.State != "CONTAINER_EXITED" || st.ExitCode != 0 {
		t.Errorf("after ACPI shutdown of the VM taken over: %+v, want exited 0", st)
	}
	n.must("rm", id)
	n.must("stopp", podID)
	n.must("rmp", podID)
	n.must("rmi", ref)
	n.stop()
	n.assertNothingLeft()
}

// TestCrictlServerRestartAdoptFails: when the restarted server cannot
// take a running VM over (here: its tap was removed while no server ran),
// it stops the VM and removes what it held, as before there was a
// takeover, and reports the container exited with the reason; the pod
// then goes with nothing left.
func TestCrictlServerRestartAdoptFails(t *testing.T) {
	n := newNode(t)
	ref := n.serveImage()
	n.start()
	n.must("pull", ref)
	podCfg, ctrCfg := n.configs(ref, n.cgroup)
	podID := strings.TrimSpace(n.must("runp", podCfg))
	id := strings.TrimSpace(n.must("create", podID, ctrCfg, podCfg))
	n.must("start", id)
	n.waitLogs(id, "VMPOD-GUEST: init", 3*time.Minute)
	pid := n.qemuPID()

	n.kill()
	tap := tapsIn(t, n.podNetns(podID))
	if len(tap) != 1 {
		t.Fatalf("taps in the pod's network namespace: %v, want the guest's", tap)
	}
	n.run("nsenter", "--net="+n.podNetns(podID), "ip", "link", "del", tap[0])
	n.start()

	st := n.inspect(id)
	if st.State != "CONTAINER_EXITED" || st.Reason != "AdoptFailed" || !strings.Contains(st.Message, tap[0]) {
		t.Errorf("after a restart that could not take the VM over: %+v, want exited, AdoptFailed, naming the tap", st)
	}
	for i := 0; i < 200 && syscall.Kill(pid, 0) == nil; i++ { // bounded: QEMU is reaped a moment after its stop
		time.Sleep(50 * time.Millisecond)
	}
	if err := syscall.Kill(pid, 0); err == nil {
		t.Errorf("QEMU %d still runs after a failed takeover", pid)
	}
	var pod struct{ Status struct{ State string } }
	n.mustJSON(&pod, "inspectp", podID)
	if pod.Status.State != "SANDBOX_READY" {
		t.Errorf("after a server restart the pod is %s, want ready", pod.Status.State)
	}
	n.must("rm", id)
	n.must("stopp", podID)
	n.must("rmp", podID)
	n.must("rmi", ref)
	n.stop()
	n.assertNothingLeft()
}

// qemuPID is the pid of the one QEMU libvirt runs under the state root
// (from its pid file).
func (n *node) qemuPID() int {
	n.t.Helper()
	files, _ := filepath.Glob(filepath.Join(n.state, "libvirt", "run", "libvirt", "qemu", "*.pid"))
	if len(files) == 0 {
		files, _ = filepath.Glob(filepath.Join(n.state, "libvirt", "run", "qemu", "*.pid"))
	}
	var pids []int
	for _, f := range files {
		if filepath.Base(f) == "driver.pid" {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			n.t.Fatal(err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			n.t.Fatalf("%s: %v", f, err)
		}
		pids = append(pids, pid)
	}
	if len(pids) != 1 {
		n.t.Fatalf("QEMU pid files under %s: %v, want one", n.state, files)
	}
	return pids[0]
}

func newNode(t *testing.T) *node {
	if os.Geteuid() != 0 {
		t.Fatal("must run as root: network namespaces, CNI, cgroups, QEMU")
	}
	// Short: QEMU's sockets go a few levels below the state root (108-byte
	// limit).
	dir, err := os.MkdirTemp("/tmp", "vmpod-cri-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	n := &node{t: t, name: "vmpod-cri-" + filepath.Base(dir)[len("vmpod-cri-"):], dir: dir,
		state: filepath.Join(dir, "s"), socket: filepath.Join(dir, "cri.sock")}
	n.nsPath = "/run/netns/" + n.name
	n.run("ip", "netns", "add", n.name)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", n.name).Run() })
	n.run("ip", "-n", n.name, "link", "set", "lo", "up")

	n.cgroup = "/" + n.name
	n.makeCgroupParent()

	conf := filepath.Join(dir, "cni", "net.d")
	if err := os.MkdirAll(conf, 0o755); err != nil {
		t.Fatal(err)
	}
	n.writeCNIConfig(false)
	n.crictl = crictlBin(t)
	if err := os.WriteFile(filepath.Join(dir, "crictl.yaml"), []byte("runtime-endpoint: unix://"+n.socket+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return n
}

// writeCNIConfig writes the node's pod network: a bridge, and with
// hostPorts CNI's portmap plugin after it (host ports, as a kubelet node
// has them).
func (n *node) writeCNIConfig(hostPorts bool) {
	portmap := ""
	if hostPorts {
		portmap = `, {"type": "portmap", "capabilities": {"portMappings": true}}`
	}
	cni := fmt.Sprintf(`{"cniVersion": "1.0.0", "name": "vmpod-cri-test", "plugins": [{
  "type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
  "ipam": {"type": "host-local", "dataDir": %q, "ranges": [[{"subnet": "10.88.0.0/16"}]], "routes": [{"dst": "0.0.0.0/0"}]}}%s]}`,
		filepath.Join(n.dir, "cni", "ipam"), portmap)
	if err := os.WriteFile(filepath.Join(n.dir, "cni", "net.d", "10-vmpod.conflist"), []byte(cni), 0o644); err != nil {
		n.t.Fatal(err)
	}
}

// makeCgroupParent makes the pods' cgroup parent in every cgroup v1
// hierarchy (and the unified one), as the kubelet's cgroupfs driver would.
func (n *node) makeCgroupParent() {
	roots, _ := filepath.Glob("/sys/fs/cgroup/*")
	var made []string
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		roots = []string{"/sys/fs/cgroup"} // cgroup v2
	}
	for _, r := range roots {
		if fi, err := os.Lstat(r); err != nil || !fi.IsDir() {
			continue // the cpu -> cpu,cpuacct links
		}
		d := filepath.Join(r, n.cgroup)
		if err := os.Mkdir(d, 0o755); err == nil {
			made = append(made, d)
		}
	}
	n.t.Cleanup(func() {
		n.sweep()
		for _, d := range made {
			os.Remove(d)
		}
	})
}

// sweep removes what a test that failed half-way (its server killed with
// its VMs running) left: the QEMUs of its state root (by pid), the mounts
// under its dir, and the cgroups under its parent, deepest first.
func (n *node) sweep() {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var pids []int
	for _, p := range procs {
		if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), n.state) {
			if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p))); err == nil && pid != os.Getpid() {
				pids = append(pids, pid)
			}
		}
	}
	for _, pid := range pids {
		n.t.Logf("sweep: killing pid %d, left by the test", pid)
		syscall.Kill(pid, syscall.SIGKILL)
	}
	for _, pid := range pids { // bounded: a killed process goes within seconds
		for i := 0; i < 100 && syscall.Kill(pid, 0) == nil; i++ {
			time.Sleep(50 * time.Millisecond)
		}
	}
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], n.dir+"/") {
				syscall.Unmount(f[4], syscall.MNT_DETACH)
			}
		}
	}
	roots, _ := filepath.Glob("/sys/fs/cgroup/*")
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		roots = []string{"/sys/fs/cgroup"}
	}
	for _, r := range roots {
		var dirs []string
		filepath.WalkDir(filepath.Join(r, n.cgroup), func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() && p != filepath.Join(r, n.cgroup) {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			os.Remove(dirs[i])
		}
	}
}

// serveImage serves the test guest's containerdisk from a registry on the
// node namespace's loopback and returns its reference there.
func (n *node) serveImage() string {
	t := n.t
	img, err := testguest.OpenArchive(testguest.Archive(t), filepath.Join(n.dir, "oci"))
	if err != nil {
		t.Fatal(err)
	}
	n.registry, n.pushHost = n.serveRegistry()
	return n.pushImage(img, "vmpod/test-guest:v1")
}

// pushImage pushes img to the test registry serveImage started, as
// repoTag, and returns its reference in the node's namespace.
func (n *node) pushImage(img v1.Image, repoTag string) string {
	t := n.t
	r, err := name.ParseReference(n.pushHost + "/" + repoTag)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img); err != nil {
		t.Fatalf("push %s: %v", repoTag, err)
	}
	return n.registry + "/" + repoTag
}

// serveRegistry serves an empty registry on the node namespace's
// loopback until the test ends, and returns its host:port there and the
// host:port the test pushes to (the same registry, on the test's own
// loopback).
func (n *node) serveRegistry() (host, pushHost string) {
	t := n.t
	h := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	l := listenIn(t, n.nsPath)
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	push := httptest.NewServer(h)
	t.Cleanup(push.Close)
	return l.Addr().String(), strings.TrimPrefix(push.URL, "http://")
}

// listenIn listens on 127.0.0.1 of the network namespace at path: the
// socket is made on a thread in it and stays there.
func listenIn(t *testing.T, path string) net.Listener {
	l, err := inNetns(path, func() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") })
	if err != nil {
		t.Fatalf("listen in %s: %v", path, err)
	}
	return l
}

// inNetns runs f on a thread in the network namespace at path, so that
// the sockets it makes belong to that namespace.
func inNetns[T any](path string, f func() (T, error)) (T, error) {
	type res struct {
		v   T
		err error
	}
	c := make(chan res, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		ns, err := netns.GetFromPath(path)
		if err == nil {
			err = netns.Set(ns)
			ns.Close()
		}
		if err != nil {
			c <- res{err: err}
			return
		}
		v, err := f()
		c <- res{v, err}
	}()
	r := <-c
	return r.v, r.err
}

// start runs `vm-runtime cri` (built once) in the node's namespace until
// the test ends or stop or kill.
func (n *node) start() {
	t := n.t
	if n.bin == "" {
		n.bin = filepath.Join(n.dir, "vm-runtime")
		repo.Build(t, n.dir, repo.NodeRuntime...)
		n.logPath = filepath.Join(n.dir, "cri.log")
		t.Cleanup(func() {
			if n.server != nil {
				n.server.Process.Kill()
				n.server.Wait()
			}
			if t.Failed() {
				b, _ := os.ReadFile(n.logPath)
				t.Logf("vm-runtime cri's log:\n%s", b)
			}
		})
	}
	logf, err := os.OpenFile(n.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	n.server = exec.Command("nsenter", "--net="+n.nsPath, n.bin, "cri",
		"--listen", "unix://"+n.socket, "--state-root", n.state, "--netns-dir", filepath.Join(n.dir, "netns"),
		"--cni-conf-dir", filepath.Join(n.dir, "cni", "net.d"), "--cni-bin-dir", "/usr/lib/cni",
		"--capabilities-cache", filepath.Join(n.dir, "caps"), "--default-cgroup-parent", n.cgroup)
	n.server.Args = append(n.server.Args, n.serverArgs...)
	n.server.Stdout, n.server.Stderr = logf, logf
	if err := n.server.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := n.crictlRun(10*time.Second, "version"); err == nil {
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("vm-runtime cri did not answer: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// kill ends the server as a crash would.
func (n *node) kill() {
	n.server.Process.Kill()
	n.server.Wait()
	n.server = nil
}

// stop ends the server as its service manager would.
func (n *node) stop() {
	n.server.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- n.server.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			n.t.Errorf("vm-runtime cri exited: %v", err)
		}
	case <-time.After(30 * time.Second):
		n.t.Error("vm-runtime cri did not exit on SIGTERM")
		n.server.Process.Kill()
		<-done
	}
	n.server = nil
}

// assertNothingLeft: no QEMU, domain, mount, netns, veth, cgroup, pod
// dir or checkpoint of the test's is left.
func (n *node) assertNothingLeft() {
	t := n.t
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), n.state) {
			t.Errorf("a process of the test's state root is left: %s: %q", p, b)
		}
	}
	if defs, _ := filepath.Glob(filepath.Join(n.state, "libvirt", "etc", "libvirt", "qemu", "*.xml")); len(defs) > 0 {
		t.Errorf("domains left: %v", defs)
	}
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, n.dir) {
				t.Errorf("mount left: %s", line)
			}
		}
	}
	for _, d := range []string{filepath.Join(n.dir, "netns"), filepath.Join(n.state, "pods"),
		filepath.Join(n.state, "cri", "sandboxes"), filepath.Join(n.state, "cri", "containers"), filepath.Join(n.state, "vms"), filepath.Join(n.state, "uids")} {
		entries, _ := os.ReadDir(d)
		var names []string
		for _, e := range entries {
			if e.Name() != ".lock" { // the uid leases' lock, the node's
				names = append(names, e.Name())
			}
		}
		if len(names) > 0 {
			t.Errorf("%s: left %v", d, names)
		}
	}
	if out, err := exec.Command("ip", "-n", n.name, "-o", "link", "show", "type", "veth").CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "" {
		t.Errorf("veths left in the node namespace (%v):\n%s", err, out)
	}
	cgs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", n.cgroup, "*"))
	for _, cg := range cgs {
		if fi, err := os.Stat(cg); err == nil && fi.IsDir() {
			t.Errorf("cgroup left: %s", cg)
		}
	}
}

// checkLogFormat: every line of the CRI log is "<RFC3339Nano> stdout F|P <text>".
func (n *node) checkLogFormat(path string) {
	f, err := os.Open(path)
	if err != nil {
		n.t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	lines := 0
	for sc.Scan() {
		lines++
		ts, rest, ok := strings.Cut(sc.Text(), " ")
		if _, err := time.Parse(time.RFC3339Nano, ts); err != nil || !ok ||
			!(strings.HasPrefix(rest, "stdout F ") || strings.HasPrefix(rest, "stdout P ")) {
			n.t.Errorf("%s: line %d is not in the CRI log format: %q", path, lines, sc.Text())
			return
		}
	}
	if lines == 0 {
		n.t.Errorf("%s is empty", path)
	}
}

func (n *node) waitLogs(id, marker string, timeout time.Duration) string {
	n.t.Helper()
	deadline := time.Now().Add(timeout)
	var out string
	for time.Now().Before(deadline) {
		out, _ = n.crictlRun(30*time.Second, "logs", id)
		if strings.Contains(out, marker) {
			return out
		}
		time.Sleep(500 * time.Millisecond)
	}
	n.t.Fatalf("no %q in crictl logs within %v:\n%s", marker, timeout, out)
	return ""
}

func (n *node) must(args ...string) string {
	n.t.Helper()
	out, err := n.crictlRun(3*time.Minute, args...)
	if err != nil {
		n.t.Fatal(err)
	}
	return out
}

func (n *node) mustJSON(v any, args ...string) {
	n.t.Helper()
	out := n.must(append([]string{args[0], "-o", "json"}, args[1:]...)...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		n.t.Fatalf("crictl %v: %v\n%s", args, err, out)
	}
}

// containerStatus is what `crictl inspect` says of a container's state.
type containerStatus struct {
	State    string
	ExitCode int
	Reason   string
	Message  string
}

// inspect is the container's status, from `crictl inspect`.
func (n *node) inspect(id string) containerStatus {
	var st struct{ Status containerStatus }
	n.mustJSON(&st, "inspect", id)
	return st.Status
}

func (n *node) crictlRun(timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout+10*time.Second)
	defer cancel()
	argv := append([]string{"--config", filepath.Join(n.dir, "crictl.yaml"),
		"--runtime-endpoint", "unix://" + n.socket, "--image-endpoint", "unix://" + n.socket,
		"--timeout", timeout.String()}, args...)
	cmd := n.crictlCmd(ctx, argv...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("crictl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

func (n *node) writeJSON(file string, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		n.t.Fatal(err)
	}
	p := filepath.Join(n.dir, file)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		n.t.Fatal(err)
	}
	return p
}

func (n *node) run(name string, args ...string) {
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		n.t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}

// crictlBin is $VMPOD_CRICTL, or crictl in <repo>/_output/bin, built
// there at crictlVersion when missing (as hack/containerd/install.sh
// does).
func crictlBin(t *testing.T) string {
	if p := os.Getenv("VMPOD_CRICTL"); p != "" {
		return p
	}
	bindir := filepath.Join(repo.Root(t), "_output", "bin")
	p := filepath.Join(bindir, "crictl")
	if _, err := os.Stat(p); err == nil {
		return p
	}
	cmd := exec.Command("go", "install", "sigs.k8s.io/cri-tools/cmd/crictl@"+crictlVersion)
	cmd.Env = append(os.Environ(), "GOBIN="+bindir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build crictl: %v\n%s", err, out)
	}
	return p
}
