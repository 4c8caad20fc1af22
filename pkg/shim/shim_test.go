package shim_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	taskAPI "github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/containerd/api/types/task"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"github.com/containerd/typeurl/v2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/vmpod/vmpod/internal/procmem"
	"github.com/vmpod/vmpod/internal/testguest"
)

// serial collects what the shim writes to the task's stdout FIFO.
type serial struct {
	mu    sync.Mutex
	lines []string
	at    []time.Time // when each line was read
}

func readSerial(f *os.File, deadline time.Time) *serial {
	s := &serial{}
	go func() {
		r := bufio.NewReader(f)
		for time.Now().Before(deadline) {
			line, err := r.ReadString('\n')
			if line != "" {
				s.mu.Lock()
				s.lines = append(s.lines, strings.TrimRight(line, "\n"))
				s.at = append(s.at, time.Now())
				s.mu.Unlock()
			}
			if errors.Is(err, io.EOF) {
				time.Sleep(50 * time.Millisecond) // no writer yet, or it closed
			} else if err != nil {
				return
			}
		}
	}()
	return s
}

// when is the time the first line holding marker was read, and the line;
// "" marks the first line of all.
func (s *serial) when(marker string) (time.Time, string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, l := range s.lines {
		if strings.Contains(l, marker) {
			return s.at[i], l, true
		}
	}
	return time.Time{}, "", false
}

func (s *serial) waitFor(t testing.TB, marker string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if s.has(marker) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t.Fatalf("no %q on the serial console within %v; got:\n%s", marker, timeout, strings.Join(s.lines, "\n"))
}

func (s *serial) has(marker string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.lines {
		if strings.Contains(l, marker) {
			return true
		}
	}
	return false
}

// podEnv is one pod run by the shim as containerd would run it.
type podEnv struct {
	env     shimEnv
	daemon  *nodeDaemon
	fc      *fakeContainerd
	p       testPod
	nodeNS  string
	podNS   string
	podIP   string
	stdout  *serial
	shimLog *serial
	// shimExec is how long the shim's start command took for the pod's
	// first task (it forks the pod's shim); createdAt and startedAt are
	// when the VM task's Create and Start were sent.
	shimExec             time.Duration
	createdAt, startedAt time.Time
}

func newPodEnv(t testing.TB) *podEnv {
	t.Helper()
	// Short: unix socket paths must stay under 108 bytes.
	dir, err := os.MkdirTemp("/tmp", "vmpod-shim-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	e := &podEnv{}
	e.fc = startFakeContainerd(t, dir)
	// One node daemon, and state root, for all the pods of a test
	// binary, as a node has one. The pods run one after the other.
	e.daemon = daemon(t)
	e.env = shimEnv{bin: buildShim(t), state: e.daemon.state, containerd: e.fc.addr}
	e.nodeNS, e.podNS, e.podIP = network(t)
	e.p = testPod{
		sandboxID: "sbx0123", vmID: "vm4567",
		sandboxBundle: filepath.Join(dir, "bundles", "sbx0123"), vmBundle: filepath.Join(dir, "bundles", "vm4567"),
		cgroupParent: cgroupParent(t),
	}
	writeBundle(t, e.p.sandboxBundle, sandboxSpec(e.p, e.podNS, nil))
	// containerd reads the shim's log from a FIFO named log in the bundle
	// the shim started in; show it when the test fails.
	e.shimLog = readSerial(fifo(t, filepath.Join(e.p.sandboxBundle, "log")), time.Now().Add(5*time.Minute))
	t.Cleanup(func() {
		if t.Failed() {
			e.shimLog.mu.Lock()
			t.Logf("shim log:\n%s", strings.Join(e.shimLog.lines, "\n"))
			e.shimLog.mu.Unlock()
		}
	})
	writeBundle(t, e.p.vmBundle, vmSpec(e.p, e.podNS, "", nil))
	testguest.Rootfs(t, e.p.vmBundle)
	return e
}

// runPod does what containerd does to start a pod whose container is the
// VM: bootstrap, sandbox Create/Start, VM Create/Start.
func (e *podEnv) runPod(t testing.TB, ctx context.Context) (taskAPI.TTRPCTaskService, uint32) {
	t.Helper()
	began := time.Now()
	addr := e.env.start(t, e.p.sandboxID, e.p.sandboxBundle)
	e.shimExec = time.Since(began)
	c := dial(t, addr)
	killShimOnCleanup(t, ctx, c.Connect, e.p.sandboxID)
	if _, err := c.Create(ctx, &taskAPI.CreateTaskRequest{ID: e.p.sandboxID, Bundle: e.p.sandboxBundle}); err != nil {
		t.Fatalf("create sandbox: %v", err)
	}
	if _, err := c.Start(ctx, &taskAPI.StartRequest{ID: e.p.sandboxID}); err != nil {
		t.Fatalf("start sandbox: %v", err)
	}
	// The VM task goes to the same shim, as containerd groups by sandbox id.
	if again := e.env.start(t, e.p.vmID, e.p.vmBundle); again != addr {
		t.Fatalf("second task got shim %s, want the pod's %s", again, addr)
	}
	stdout := filepath.Join(e.p.vmBundle, "stdout")
	f := fifo(t, stdout)
	e.stdout = readSerial(f, time.Now().Add(4*time.Minute))
	e.createdAt = time.Now()
	if _, err := c.Create(ctx, &taskAPI.CreateTaskRequest{ID: e.p.vmID, Bundle: e.p.vmBundle, Stdout: stdout}); err != nil {
		t.Fatalf("create VM: %v", err)
	}
	e.startedAt = time.Now()
	resp, err := c.Start(ctx, &taskAPI.StartRequest{ID: e.p.vmID})
	if err != nil {
		t.Fatalf("start VM: %v", err)
	}
	// QEMU outlives a failed test's shim: it goes with the test.
	t.Cleanup(func() {
		if alive(int(resp.Pid)) {
			syscall.Kill(int(resp.Pid), syscall.SIGKILL)
		}
	})
	return c, resp.Pid
}

// shimPID is the pid of the pod's shim.
func (e *podEnv) shimPID(t testing.TB, ctx context.Context, c taskAPI.TTRPCTaskService) int {
	t.Helper()
	conn, err := c.Connect(ctx, &taskAPI.ConnectRequest{ID: e.p.vmID})
	if err != nil {
		t.Fatal(err)
	}
	return int(conn.ShimPid)
}

// TestShimRunsVMPod plays containerd against the real shim binary: a pod
// whose container is the test guest boots in a network namespace the test
// made, answers HTTP on the pod IP, runs on while the node daemon is
// killed and started again, powers itself off with exit status 0, and
// leaves nothing behind.
func TestShimRunsVMPod(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	e := newPodEnv(t)
	c, qemuPID := e.runPod(t, ctx)

	st, err := c.State(ctx, &taskAPI.StateRequest{ID: e.p.vmID})
	if err != nil || st.Status != task.Status_RUNNING || st.Pid != qemuPID {
		t.Fatalf("State = %v, %v; want running with pid %d", st, err, qemuPID)
	}
	e.stdout.waitFor(t, "VMPOD-GUEST: init", 2*time.Minute)
	t.Logf("StartContainer -> first serial line: %v", time.Since(e.startedAt).Round(time.Millisecond))
	e.stdout.waitFor(t, "VMPOD-GUEST: ip "+e.podIP+"/24", time.Minute)
	e.stdout.waitFor(t, "VMPOD-GUEST: qemu-ga ready", time.Minute)
	e.stdout.waitFor(t, "VMPOD-GUEST: ready", time.Minute)

	// QEMU runs in the VM container's cgroup, under the pod's.
	cg, err := os.ReadFile("/proc/" + itoa(int(qemuPID)) + "/cgroup")
	if err != nil || !strings.Contains(string(cg), e.p.cgroupParent+"/"+e.p.vmID) {
		t.Errorf("QEMU cgroups %q (%v), want %s/%s", cg, err, e.p.cgroupParent, e.p.vmID)
	}

	// QEMU runs jailed, as the uid leased to its pod.
	testguest.AssertJailed(t, int(qemuPID), e.leasedUID(t))
	// With the container's oom_score_adj, not the shim's.
	if b, err := os.ReadFile("/proc/" + itoa(int(qemuPID)) + "/oom_score_adj"); err != nil ||
		strings.TrimSpace(string(b)) != itoa(burstableOOMScoreAdj) {
		t.Errorf("QEMU's oom_score_adj = %q, %v; want the container's %d", b, err, burstableOOMScoreAdj)
	}

	// The guest answers on the pod IP, seen from the node.
	body := httpGet(t, e.nodeNS, e.podIP+":8080")
	if !strings.Contains(body, "vmpod-guest") {
		t.Errorf("HTTP from the guest = %q, want vmpod-guest", body)
	}

	stats, err := c.Stats(ctx, &taskAPI.StatsRequest{ID: e.p.vmID})
	if err != nil || stats.Stats == nil {
		t.Errorf("Stats = %v, %v", stats, err)
	}
	// CPU limits change live; memory cannot.
	quota, period := int64(50000), uint64(100000)
	res, err := typeurl.MarshalAnyToProto(&specs.LinuxResources{CPU: &specs.LinuxCPU{Quota: &quota, Period: &period}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Update(ctx, &taskAPI.UpdateTaskRequest{ID: e.p.vmID, Resources: res}); err != nil {
		t.Errorf("Update cpu: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/cpu", e.p.cgroupParent, e.p.vmID, "cpu.cfs_quota_us")); err != nil ||
		strings.TrimSpace(string(b)) != "50000" {
		t.Errorf("cpu.cfs_quota_us = %q, %v; want 50000", b, err)
	}
	mem := int64(512 << 20)
	if res, err = typeurl.MarshalAnyToProto(&specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: &mem}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Update(ctx, &taskAPI.UpdateTaskRequest{ID: e.p.vmID, Resources: res}); err == nil ||
		!strings.Contains(err.Error(), "created without room to change it live; set vmpod.io/max-memory") {
		t.Errorf("Update memory error = %v, want a refusal naming vmpod.io/max-memory", err)
	}
	// kubectl exec: a command in the guest, through the guest agent.
	if out, errOut, status := execIn(t, ctx, c, e.p.vmID, "echo", []string{"echo", "hello"}, ""); out != "hello\n" || status != 0 {
		t.Errorf("exec echo hello: stdout %q, stderr %q, status %d; want \"hello\\n\", 0", out, errOut, status)
	}
	if _, errOut, status := execIn(t, ctx, c, e.p.vmID, "fail", []string{"sh", "-c", "echo oops >&2; exit 3"}, ""); errOut != "oops\n" || status != 3 {
		t.Errorf("exec exit 3: stderr %q, status %d; want \"oops\\n\", 3", errOut, status)
	}
	catExec := time.Now()
	if out, errOut, status := execIn(t, ctx, c, e.p.vmID, "cat", []string{"cat"}, "piped\n"); out != "piped\n" || status != 0 {
		t.Errorf("exec cat with stdin: stdout %q, stderr %q, status %d; want \"piped\\n\", 0", out, errOut, status)
	}
	t.Logf("exec cat: %v", time.Since(catExec).Round(time.Millisecond))
	if _, err := c.Exec(ctx, &taskAPI.ExecProcessRequest{ID: e.p.vmID, ExecID: "tty", Terminal: true, Spec: processSpec(t, "sh")}); err == nil ||
		!strings.Contains(err.Error(), "without a TTY") {
		t.Errorf("exec with a terminal: %v; want a refusal that names the missing TTY", err)
	}

	// The node daemon runs the VM: the shim starts no process.
	shimPID := e.shimPID(t, ctx, c)
	if kids, err := procmem.Children([]int{shimPID}, ""); err != nil || len(kids) > 0 {
		t.Errorf("the shim's children: %v, %v; want none", kids, err)
	}

	// The daemon is killed under the running VM and comes back: the VM
	// runs on, the task stays running, exec works, and the console goes
	// on where it was.
	e.daemon.kill(t, syscall.SIGKILL)
	if !alive(int(qemuPID)) {
		t.Fatalf("QEMU %d went with the node daemon", qemuPID)
	}
	if _, errOut, status := execIn(t, ctx, c, e.p.vmID, "away", []string{"true"}, ""); status != 126 || !strings.Contains(errOut, "node daemon") {
		t.Errorf("exec while the daemon is away: stderr %q, status %d; want 126 naming the node daemon", errOut, status)
	}
	e.daemon.ensure(t)
	if st, err := c.State(ctx, &taskAPI.StateRequest{ID: e.p.vmID}); err != nil || st.Status != task.Status_RUNNING {
		t.Fatalf("State after the daemon's restart = %v, %v; want running", st, err)
	}
	if out, errOut, status := execIn(t, ctx, c, e.p.vmID, "again", []string{"sh", "-c", "echo VMPOD-TEST: after the restart >/dev/console; echo again"}, ""); out != "again\n" || status != 0 {
		t.Errorf("exec after the daemon's restart: stdout %q, stderr %q, status %d; want \"again\\n\", 0", out, errOut, status)
	}
	e.stdout.waitFor(t, "VMPOD-TEST: after the restart", 30*time.Second)

	// The guest then powers itself off under the new daemon, and the
	// container exits 0.
	if _, errOut, status := execIn(t, ctx, c, e.p.vmID, "poweroff", []string{"sh", "-c", "(sleep 3; poweroff -f) >/dev/null 2>&1 </dev/null &"}, ""); status != 0 {
		t.Fatalf("exec a delayed poweroff: stderr %q, status %d", errOut, status)
	}
	w, err := c.Wait(ctx, &taskAPI.WaitRequest{ID: e.p.vmID})
	if err != nil || w.ExitStatus != 0 {
		t.Fatalf("Wait = %v, %v; want exit status 0", w, err)
	}
	if !waitGone(int(qemuPID), 10*time.Second) {
		t.Errorf("QEMU %d still runs after the guest powered off", qemuPID)
	}

	e.deletePod(t, ctx, c)
	if !waitGone(int(qemuPID), 10*time.Second) {
		t.Errorf("QEMU %d still runs", qemuPID)
	}
	e.assertClean(t)
	for _, topic := range []string{"/tasks/create", "/tasks/start", "/tasks/exit", "/tasks/delete"} {
		if !e.fc.seen(topic) {
			t.Errorf("containerd got no %s event", topic)
		}
	}
}

// poweredOff checks a VM's exit after the ACPI power button: status 0, the
// guest's "poweroff" line, QEMU gone; then deletes the pod and checks that
// nothing is left.
func (e *podEnv) poweredOff(t *testing.T, ctx context.Context, c taskAPI.TTRPCTaskService, w *taskAPI.WaitResponse, qemuPID uint32) {
	t.Helper()
	if w.ExitStatus != 0 {
		t.Errorf("exit status %d after the ACPI power button, want 0 (the guest powered off)", w.ExitStatus)
	}
	e.stdout.waitFor(t, "VMPOD-GUEST: poweroff", 10*time.Second) // the guest saw the button
	if !waitGone(int(qemuPID), 10*time.Second) {
		t.Errorf("QEMU %d still runs after the guest powered off", qemuPID)
	}
	e.deletePod(t, ctx, c)
	e.assertClean(t)
}

// TestShimStopsBootingGuest: a SIGTERM while the guest boots, before it
// listens for the ACPI power button, still powers it off: containerd sends
// SIGTERM once, so the shim presses the button again until the VM stops.
// The container exits 0, not at the SIGKILL a lost press would wait for.
func TestShimStopsBootingGuest(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	e := newPodEnv(t)
	c, qemuPID := e.runPod(t, ctx)
	// Start has just returned: the guest is in its firmware or kernel.
	if _, err := c.Kill(ctx, &taskAPI.KillRequest{ID: e.p.vmID, Signal: uint32(syscall.SIGTERM)}); err != nil {
		t.Fatal(err)
	}
	w, err := c.Wait(ctx, &taskAPI.WaitRequest{ID: e.p.vmID})
	if err != nil {
		t.Fatalf("Wait after a SIGTERM while the guest booted: %v; the guest never powered off", err)
	}
	e.poweredOff(t, ctx, c, w, qemuPID)
}

// deletePod does what containerd does when the kubelet removes the pod.
func (e *podEnv) deletePod(t testing.TB, ctx context.Context, c taskAPI.TTRPCTaskService) {
	t.Helper()
	if _, err := c.Delete(ctx, &taskAPI.DeleteRequest{ID: e.p.vmID}); err != nil {
		t.Fatalf("delete VM: %v", err)
	}
	e.env.delete(t, e.p.vmID, e.p.vmBundle)
	if _, err := c.Kill(ctx, &taskAPI.KillRequest{ID: e.p.sandboxID, Signal: uint32(syscall.SIGKILL), All: true}); err != nil {
		t.Fatalf("kill sandbox: %v", err)
	}
	if _, err := c.Wait(ctx, &taskAPI.WaitRequest{ID: e.p.sandboxID}); err != nil {
		t.Fatalf("wait sandbox: %v", err)
	}
	if _, err := c.Delete(ctx, &taskAPI.DeleteRequest{ID: e.p.sandboxID}); err != nil {
		t.Fatalf("delete sandbox: %v", err)
	}
	conn, err := c.Connect(ctx, &taskAPI.ConnectRequest{ID: e.p.sandboxID})
	shimPID := 0
	if err == nil {
		shimPID = int(conn.ShimPid)
	}
	_, _ = c.Shutdown(ctx, &taskAPI.ShutdownRequest{ID: e.p.sandboxID})
	e.env.delete(t, e.p.sandboxID, e.p.sandboxBundle)
	if shimPID > 0 && !waitGone(shimPID, 10*time.Second) {
		t.Errorf("shim %d still runs after Shutdown", shimPID)
	}
}

// assertClean checks that the pod left nothing: no state dir, no tap or tc
// rules in the pod netns, no cgroup below the pod's.
func (e *podEnv) assertClean(t testing.TB) {
	t.Helper()
	if entries, err := os.ReadDir(filepath.Join(e.env.state, "pods")); err == nil && len(entries) > 0 {
		t.Errorf("pod state dirs left: %v", entries)
	}
	if out, err := exec.Command("ip", "-n", filepath.Base(e.podNS), "-o", "link", "show", "type", "tun").CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "" {
		t.Errorf("tap left in the pod netns: %s %v", out, err)
	}
	if out, _ := exec.Command("tc", "-n", filepath.Base(e.podNS), "qdisc", "show", "dev", "eth0", "ingress").CombinedOutput(); strings.TrimSpace(string(out)) != "" {
		t.Errorf("ingress qdisc left on eth0: %s", out)
	}
	if dirs := cgroupDirs(e.p.cgroupParent); len(dirs) > 0 {
		t.Errorf("cgroups left: %v", dirs)
	}
	if leases, _ := filepath.Glob(filepath.Join(e.env.state, "uids", "[0-9]*")); len(leases) > 0 {
		t.Errorf("QEMU uid leases left: %v", leases)
	}
}

// leasedUID is the uid the pod's QEMU was given (the one lease in the
// state root).
func (e *podEnv) leasedUID(t testing.TB) uint32 {
	t.Helper()
	leases, _ := filepath.Glob(filepath.Join(e.env.state, "uids", "[0-9]*"))
	if len(leases) != 1 {
		t.Fatalf("QEMU uid leases: %v, want one", leases)
	}
	uid, err := strconv.ParseUint(filepath.Base(leases[0]), 10, 32)
	if err != nil {
		t.Fatal(err)
	}
	return uint32(uid)
}

// httpGet fetches from addr inside the node netns, retrying a bounded
// number of times while the guest's server comes up.
func httpGet(t testing.TB, netns, addr string) string {
	t.Helper()
	var body string
	var lastErr error
	for i := 0; i < 20 && body == ""; i++ {
		lastErr = inNetns(t, netns, func() error {
			conn, err := net.DialTimeout("tcp", addr, 3*time.Second)
			if err != nil {
				return err
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := conn.Write([]byte("GET / HTTP/1.0\r\n\r\n")); err != nil {
				return err
			}
			b, err := io.ReadAll(conn)
			body = string(b)
			return err
		})
		if body == "" {
			time.Sleep(500 * time.Millisecond)
		}
	}
	if body == "" {
		t.Fatalf("no HTTP answer from %s: %v", addr, lastErr)
	}
	return body
}

func itoa(i int) string { return strconvItoa(i) }

// TestShimKilled: a shim killed -9 leaves its VM running; the delete
// command containerd then runs for each task destroys the VM and removes
// everything the shim made.
func TestShimKilled(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	e := newPodEnv(t)
	c, qemuPID := e.runPod(t, ctx)
	e.stdout.waitFor(t, "VMPOD-GUEST: init", 2*time.Minute)
	shimPID := e.shimPID(t, ctx, c)
	if err := syscall.Kill(shimPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if !waitGone(shimPID, 10*time.Second) {
		t.Fatalf("shim %d survived SIGKILL", shimPID)
	}
	if !alive(int(qemuPID)) {
		t.Fatalf("QEMU %d died with its shim; it should outlive it", qemuPID)
	}

	// What containerd does for a dead shim: delete for each task.
	resp := e.env.delete(t, e.p.vmID, e.p.vmBundle)
	if resp.ExitStatus != 137 {
		t.Errorf("delete exit status %d, want 137", resp.ExitStatus)
	}
	e.env.delete(t, e.p.sandboxID, e.p.sandboxBundle)
	if !waitGone(int(qemuPID), 10*time.Second) {
		t.Errorf("QEMU %d still runs after delete", qemuPID)
	}
	e.assertClean(t)
}

// TestShimRefusesVMBeyondPodLimit: the pod cgroup's limit (pod limits plus
// the RuntimeClass overhead) must hold the guest and its overhead; a VM
// that does not fit is refused at Create, naming the podFixed it needs,
// and leaves nothing behind.
func TestShimRefusesVMBeyondPodLimit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := newPodEnv(t)
	mem := filepath.Join("/sys/fs/cgroup/memory", e.p.cgroupParent)
	if err := os.MkdirAll(mem, 0o755); err != nil {
		t.Fatal(err)
	}
	// 256 MiB of guest with no room for QEMU.
	if err := os.WriteFile(filepath.Join(mem, "memory.limit_in_bytes"), []byte("300M"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := e.createRefusedVM(t, ctx)
	if err == nil || !strings.Contains(err.Error(), "podFixed") {
		t.Fatalf("Create VM in a pod limited to 300M: error %v, want a refusal naming podFixed", err)
	}
}

// TestShimRefusesVMWithoutCgroup: a VM whose container has no cgroupsPath
// could not be charged to its pod, so Create refuses it, saying why, and
// leaves nothing behind: it never runs in the shim's cgroup unlimited.
func TestShimRefusesVMWithoutCgroup(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := newPodEnv(t)
	s := vmSpec(e.p, e.podNS, "", nil)
	s.Linux.CgroupsPath = ""
	writeBundle(t, e.p.vmBundle, s)
	err := e.createRefusedVM(t, ctx)
	if err == nil || !errdefs.IsInvalidArgument(errgrpc.ToNative(err)) || !strings.Contains(err.Error(), "cannot be charged to its pod") {
		t.Fatalf("Create VM without a cgroupsPath: error %v, want InvalidArgument saying it cannot be charged to its pod", err)
	}
}

// TestShimRefusesHostileImage: a containerdisk whose disk is a qcow2 with a
// backing file on the host is refused at Create with InvalidArgument naming
// the file, and the failed Create leaves nothing behind.
func TestShimRefusesHostileImage(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := newPodEnv(t)
	rootfs := filepath.Join(e.p.vmBundle, "rootfs")
	disks, _ := filepath.Glob(filepath.Join(rootfs, "disk", "*"))
	for _, d := range disks {
		if err := os.Remove(d); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", "-u", "-F", "raw", "-b", "/etc/shadow",
		filepath.Join(rootfs, "disk", "disk.qcow2"), "64M").CombinedOutput(); err != nil {
		t.Fatalf("qemu-img: %v: %s", err, out)
	}
	err := e.createRefusedVM(t, ctx)
	if err == nil || !errdefs.IsInvalidArgument(errgrpc.ToNative(err)) ||
		!strings.Contains(err.Error(), `image file /disk/disk.qcow2: has a backing file ("/etc/shadow")`) {
		t.Fatalf("Create VM from a disk backed by /etc/shadow: error %v, want InvalidArgument naming the file and its backing file", err)
	}
}

// createRefusedVM does what containerd does for a pod whose VM task Create
// fails: sandbox Create, VM Create, then the VM's delete command and the
// sandbox's kill, delete and shutdown. It checks that nothing is left and
// returns the VM Create's error for the test to judge.
func (e *podEnv) createRefusedVM(t *testing.T, ctx context.Context) error {
	t.Helper()
	c := dial(t, e.env.start(t, e.p.sandboxID, e.p.sandboxBundle))
	if _, err := c.Create(ctx, &taskAPI.CreateTaskRequest{ID: e.p.sandboxID, Bundle: e.p.sandboxBundle}); err != nil {
		t.Fatal(err)
	}
	e.env.start(t, e.p.vmID, e.p.vmBundle)
	_, createErr := c.Create(ctx, &taskAPI.CreateTaskRequest{ID: e.p.vmID, Bundle: e.p.vmBundle})
	e.env.delete(t, e.p.vmID, e.p.vmBundle)
	if _, err := c.Kill(ctx, &taskAPI.KillRequest{ID: e.p.sandboxID, Signal: uint32(syscall.SIGKILL)}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Delete(ctx, &taskAPI.DeleteRequest{ID: e.p.sandboxID}); err != nil {
		t.Fatal(err)
	}
	_, _ = c.Shutdown(ctx, &taskAPI.ShutdownRequest{ID: e.p.sandboxID})
	e.env.delete(t, e.p.sandboxID, e.p.sandboxBundle)
	e.assertClean(t)
	return createErr
}

func processSpec(t testing.TB, args ...string) *anypb.Any {
	t.Helper()
	a, err := typeurl.MarshalAnyToProto(&specs.Process{Args: args, Cwd: "/"})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// execIn runs args in the guest through the task API as containerd does
// for kubectl exec (FIFOs for stdio, Exec, Start, Wait, Delete) and
// returns its stdout, stderr and exit status.
func execIn(t testing.TB, ctx context.Context, c taskAPI.TTRPCTaskService, id, execID string, args []string, stdin string) (string, string, uint32) {
	t.Helper()
	dir := t.TempDir()
	req := &taskAPI.ExecProcessRequest{ID: id, ExecID: execID, Spec: processSpec(t, args...),
		Stdout: filepath.Join(dir, "stdout"), Stderr: filepath.Join(dir, "stderr")}
	if stdin != "" {
		req.Stdin = filepath.Join(dir, "stdin")
	}
	read := func(path string) <-chan string {
		if err := unix.Mkfifo(path, 0o600); err != nil {
			t.Fatal(err)
		}
		got := make(chan string, 1)
		go func() {
			f, err := os.OpenFile(path, os.O_RDONLY, 0) // until the shim opens it
			if err != nil {
				got <- err.Error()
				return
			}
			defer f.Close()
			b, _ := io.ReadAll(f)
			got <- string(b)
		}()
		return got
	}
	stdout, stderr := read(req.Stdout), read(req.Stderr)
	if stdin != "" {
		if err := unix.Mkfifo(req.Stdin, 0o600); err != nil {
			t.Fatal(err)
		}
		go func() {
			f, err := os.OpenFile(req.Stdin, os.O_WRONLY, 0)
			if err != nil {
				return
			}
			f.WriteString(stdin)
			f.Close()
		}()
	}
	if _, err := c.Exec(ctx, req); err != nil {
		t.Fatalf("Exec %v: %v", args, err)
	}
	if _, err := c.Start(ctx, &taskAPI.StartRequest{ID: id, ExecID: execID}); err != nil {
		t.Fatalf("Start exec %v: %v", args, err)
	}
	w, err := c.Wait(ctx, &taskAPI.WaitRequest{ID: id, ExecID: execID})
	if err != nil {
		t.Fatalf("Wait exec %v: %v", args, err)
	}
	out, errOut := <-stdout, <-stderr
	if _, err := c.Delete(ctx, &taskAPI.DeleteRequest{ID: id, ExecID: execID}); err != nil {
		t.Errorf("Delete exec %v: %v", args, err)
	}
	return out, errOut, w.ExitStatus
}
