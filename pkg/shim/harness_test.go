package shim_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/vmpod/vmpod/internal/testenv/podenv"

	bootapi "github.com/containerd/containerd/api/runtime/bootstrap/v1"
	taskAPI "github.com/containerd/containerd/api/runtime/task/v3"
	eventsapi "github.com/containerd/containerd/api/services/ttrpc/events/v1"
	"github.com/containerd/ttrpc"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/vmpod/vmpod/pkg/vmspec"
)

// shimBinary is the shim containerd runs, cmd/containerd-shim-vmpod-v2,
// built once.
var shimBinary struct {
	once sync.Once
	path string
	err  error
}

func buildShim(t testing.TB) string {
	t.Helper()
	shimBinary.once.Do(func() {
		dir, err := os.MkdirTemp("", "vmpod-shim-bin-")
		if err != nil {
			shimBinary.err = err
			return
		}
		atExit = append(atExit, func() { os.RemoveAll(dir) })
		shimBinary.path = filepath.Join(dir, "containerd-shim-vmpod-v2")
		// As make build builds them: the shim without cgo, and next to it
		// vm-runtime, the node daemon, and its jailer.
		shim := exec.Command("go", "build", "-o", shimBinary.path, "../../cmd/containerd-shim-vmpod-v2")
		shim.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := shim.CombinedOutput(); err != nil {
			shimBinary.err = fmt.Errorf("build containerd-shim-vmpod-v2: %v\n%s", err, out)
			return
		}
		for _, c := range []string{"vm-runtime", "vmpod-qemu"} {
			build := exec.Command("go", "build", "-o", filepath.Join(dir, c), "../../cmd/"+c)
			if c == "vmpod-qemu" {
				build.Env = append(os.Environ(), "CGO_ENABLED=0") // as make build
			}
			if out, err := build.CombinedOutput(); err != nil {
				shimBinary.err = fmt.Errorf("build %s: %v\n%s", c, err, out)
				return
			}
		}
	})
	if shimBinary.err != nil {
		t.Fatal(shimBinary.err)
	}
	return shimBinary.path
}

var atExit []func()

// envSeq makes names unique when one test binary makes several pods.
var envSeq atomic.Int64

func TestMain(m *testing.M) {
	if os.Getenv(startRefEnv) != "" {
		// The start benchmark's libvirt reference (start_bench_test.go).
		os.Exit(startRefMain())
	}
	code := m.Run()
	for _, f := range atExit {
		f()
	}
	os.Exit(code)
}

// fakeContainerd is what a shim talks back to: containerd's ttrpc events
// service. It records every event.
type fakeContainerd struct {
	addr   string
	server *ttrpc.Server
	mu     sync.Mutex
	topics []string
}

func startFakeContainerd(t testing.TB, dir string) *fakeContainerd {
	t.Helper()
	f := &fakeContainerd{addr: filepath.Join(dir, "containerd.ttrpc")}
	l, err := net.Listen("unix", f.addr)
	if err != nil {
		t.Fatal(err)
	}
	f.server, err = ttrpc.NewServer()
	if err != nil {
		t.Fatal(err)
	}
	eventsapi.RegisterTTRPCEventsService(f.server, f)
	go func() { _ = f.server.Serve(context.Background(), l) }()
	t.Cleanup(func() { f.server.Close() })
	return f
}

func (f *fakeContainerd) Forward(ctx context.Context, r *eventsapi.ForwardRequest) (*emptypb.Empty, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.topics = append(f.topics, r.Envelope.Topic)
	return &emptypb.Empty{}, nil
}

func (f *fakeContainerd) seen(topic string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, t := range f.topics {
		if t == topic {
			return true
		}
	}
	return false
}

// shimEnv is the environment containerd would give the shim.
type shimEnv struct {
	bin, state, containerd string
}

func (e shimEnv) environ() []string {
	return append(os.Environ(), "TTRPC_ADDRESS="+e.containerd, "VMPOD_STATE_ROOT="+e.state,
		"VMPOD_NODE_SOCKET="+daemonSocket(e.state))
}

func daemonSocket(state string) string { return filepath.Join(state, "vmd.sock") }

// nodeDaemon is the test binary's node daemon (vm-runtime daemon, built
// beside the shim), which runs the VMs of every test's pods, with one
// state root, as a node has one: only the first pod probes QEMU.
type nodeDaemon struct {
	bin, state, log string
	// netns is the node's network namespace the daemon runs in, where it
	// makes each guest's tap before moving it into the pod's: made for
	// the test binary, removed when it ends.
	netns string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd was reaped
}

var theDaemon struct {
	once sync.Once
	d    *nodeDaemon
}

// daemon is the node daemon, started on first use (and again after a
// test killed it) and stopped when the test binary ends; its log is shown
// when a test fails.
func daemon(t testing.TB) *nodeDaemon {
	t.Helper()
	bin := filepath.Join(filepath.Dir(buildShim(t)), "vm-runtime")
	theDaemon.once.Do(func() {
		dir := filepath.Dir(bin)
		name := fmt.Sprintf("vmpodshimd%d", os.Getpid())
		theDaemon.d = &nodeDaemon{bin: bin, state: filepath.Join(dir, "state"), log: filepath.Join(dir, "daemon.log"), netns: "/run/netns/" + name}
		run(t, "ip", "netns", "add", name)
		atExit = append(atExit, func() {
			theDaemon.d.stop()
			_ = exec.Command("ip", "netns", "del", name).Run()
		})
		run(t, "ip", "-n", name, "link", "set", "lo", "up")
	})
	d := theDaemon.d
	d.ensure(t)
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(d.log)
			t.Logf("node daemon log (last 8 KiB):\n%s", b[max(0, len(b)-8192):])
		}
	})
	return d
}

// ensure starts the daemon unless it runs, and waits for its socket.
func (d *nodeDaemon) ensure(t testing.TB) {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cmd != nil {
		select {
		case <-d.exited:
		default:
			return // it runs
		}
	}
	if err := os.MkdirAll(d.state, 0o700); err != nil {
		t.Fatal(err)
	}
	logf, err := os.OpenFile(d.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	sock := daemonSocket(d.state)
	os.Remove(sock)
	cmd := exec.Command(d.bin, "daemon", "--socket", sock, "--state-root", d.state,
		"--capabilities-cache", filepath.Join(filepath.Dir(d.bin), "caps"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := inNetns(t, d.netns, cmd.Start); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	d.cmd, d.exited = cmd, exited
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	deadline := time.Now().Add(time.Minute)
	for {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			return
		}
		select {
		case <-exited:
			b, _ := os.ReadFile(d.log)
			t.Fatalf("vm-runtime daemon exited before it served %s:\n%s", sock, b)
		default:
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(d.log)
			t.Fatalf("vm-runtime daemon does not serve %s after a minute:\n%s", sock, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// kill sends the running daemon sig and waits until it is gone.
func (d *nodeDaemon) kill(t testing.TB, sig syscall.Signal) {
	t.Helper()
	d.mu.Lock()
	cmd, exited := d.cmd, d.exited
	d.mu.Unlock()
	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(15 * time.Second):
		t.Fatalf("vm-runtime daemon %d survived %v for 15 s", cmd.Process.Pid, sig)
	}
}

// stop ends the daemon (SIGTERM: VMs still running keep running, and go
// with their tests).
func (d *nodeDaemon) stop() {
	d.mu.Lock()
	cmd, exited := d.cmd, d.exited
	d.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
}

// bootstrap runs the shim's start command in bundle, as containerd does,
// and returns the ttrpc address of the pod's shim.
func (e shimEnv) start(t testing.TB, id, bundle string) string {
	t.Helper()
	params, err := proto.Marshal(&bootapi.BootstrapParams{
		InstanceID: id, Namespace: "k8s.io",
		ContainerdGrpcAddress: filepath.Join(e.state, "containerd.sock"), ContainerdTtrpcAddress: e.containerd,
		ContainerdBinary: "containerd", LogLevel: bootapi.LogLevel_LOG_LEVEL_DEBUG,
	})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(e.bin, "-namespace", "k8s.io", "-id", id, "-address", filepath.Join(e.state, "containerd.sock"), "start")
	cmd.Dir, cmd.Env, cmd.Stdin = bundle, e.environ(), strings.NewReader(string(params))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("shim start: %v: %s", err, stderrOf(err))
	}
	var res bootapi.BootstrapResult
	if err := proto.Unmarshal(out, &res); err != nil {
		t.Fatalf("shim start output: %v", err)
	}
	e.killAtCleanup(t)
	return res.Address
}

// killAtCleanup finds the long-lived shim the start command launched and
// kills it when the test ends. start forks it into its own process group
// and exits, as containerd expects, so it is not our child (init adopts
// and reaps it) and only the Shutdown a passing test sends would stop it:
// a test that failed earlier left it running. It is found by PID and start
// time: the shim binary running with this pod's VMPOD_STATE_ROOT.
func (e shimEnv) killAtCleanup(t testing.TB) {
	t.Helper()
	exe, err := filepath.EvalSymlinks(e.bin)
	if err != nil {
		t.Fatal(err)
	}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		if l, _ := os.Readlink(d + "/exe"); l != exe {
			continue
		}
		env, _ := os.ReadFile(d + "/environ")
		if !slices.Contains(strings.Split(string(env), "\x00"), "VMPOD_STATE_ROOT="+e.state) {
			continue
		}
		start := procStart(pid)
		if start == "" {
			continue
		}
		if _, dup := shimsKilledAtCleanup.LoadOrStore(fmt.Sprint(pid, " ", start), true); dup {
			continue // the pod's second task reached the same shim
		}
		t.Cleanup(func() {
			if procStart(pid) != start {
				return // gone (a passing test shut it down)
			}
			_ = syscall.Kill(pid, syscall.SIGKILL)
			deadline := time.Now().Add(10 * time.Second)
			for procStart(pid) == start {
				if time.Now().After(deadline) {
					t.Errorf("shim %d survived SIGKILL", pid)
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

// shimsKilledAtCleanup holds "pid starttime" of each shim with a cleanup.
var shimsKilledAtCleanup sync.Map

// procStart is the start time of process pid (field 22 of its stat), which
// tells it from a later process with the same PID; "" once it has exited
// (a zombie counts as exited: its parent, not us, reaps it).
func procStart(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
		return ""
	}
	return f[19]
}

// delete runs the shim's delete command for task id, as containerd does
// after every task delete and after a shim died.
func (e shimEnv) delete(t testing.TB, id, bundle string) *taskAPI.DeleteResponse {
	t.Helper()
	cmd := exec.Command(e.bin, "-namespace", "k8s.io", "-id", id, "-address", filepath.Join(e.state, "containerd.sock"), "delete")
	cmd.Dir, cmd.Env = bundle, e.environ()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("shim delete %s: %v: %s", id, err, stderrOf(err))
	}
	var res taskAPI.DeleteResponse
	if err := proto.Unmarshal(out, &res); err != nil {
		t.Fatalf("shim delete output: %v", err)
	}
	return &res
}

func stderrOf(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(ee.Stderr)
	}
	return ""
}

func dial(t testing.TB, addr string) taskAPI.TTRPCTaskService {
	t.Helper()
	conn, err := net.Dial("unix", strings.TrimPrefix(addr, "unix://"))
	if err != nil {
		t.Fatal(err)
	}
	c := ttrpc.NewClient(conn)
	t.Cleanup(func() { c.Close() })
	return taskAPI.NewTTRPCTaskClient(c)
}

// writeBundle writes config.json for a task as containerd's CRI plugin
// would.
func writeBundle(t testing.TB, dir string, s *specs.Spec) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// pod is one test pod: ids, bundles and annotations like containerd's.
type testPod struct {
	sandboxID, vmID string
	sandboxBundle   string
	vmBundle        string
	cgroupParent    string // the pod-level cgroup, cgroupfs path
}

func sandboxSpec(p testPod, netns string, extra map[string]string) *specs.Spec {
	ann := map[string]string{
		vmspec.CRIContainerType: vmspec.CRIContainerTypeSbx, vmspec.CRISandboxID: p.sandboxID,
		vmspec.CRISandboxName: "web", vmspec.CRISandboxNamespace: "default", vmspec.CRISandboxUID: "uid-1",
	}
	for k, v := range extra {
		ann[k] = v
	}
	return &specs.Spec{
		Version: specs.Version, Annotations: ann, Root: &specs.Root{Path: "rootfs"},
		Linux: &specs.Linux{
			CgroupsPath: p.cgroupParent + "/" + p.sandboxID,
			Namespaces:  []specs.LinuxNamespace{{Type: specs.NetworkNamespace, Path: netns}},
		},
	}
}

func vmSpec(p testPod, netns, memory string, extra map[string]string) *specs.Spec {
	s := sandboxSpec(p, netns, extra)
	s.Annotations[vmspec.CRIContainerType] = vmspec.CRIContainerTypeCntr
	s.Annotations[vmspec.CRIContainerName] = "vm"
	s.Annotations[vmspec.CRIImageName] = "localhost/vmpod/test-guest:v1"
	s.Linux.CgroupsPath = p.cgroupParent + "/" + p.vmID
	quota, period := int64(100000), uint64(100000)
	mem := int64(256 << 20)
	if memory != "" {
		fmt.Sscan(memory, &mem)
	}
	s.Linux.Resources = &specs.LinuxResources{
		CPU: &specs.LinuxCPU{Quota: &quota, Period: &period}, Memory: &specs.LinuxMemory{Limit: &mem},
	}
	s.Mounts = []specs.Mount{{Destination: "/etc/resolv.conf", Source: "/dev/null", Type: "bind"}}
	// containerd's CRI writes the kubelet's oom_score_adj for the
	// container here.
	adj := burstableOOMScoreAdj
	s.Process = &specs.Process{OOMScoreAdj: &adj}
	return s
}

// burstableOOMScoreAdj is an oom_score_adj the kubelet gives a Burstable
// pod's container (2..999), unlike what QEMU would inherit from the shim.
const burstableOOMScoreAdj = 500

// fifo makes a FIFO and opens its read side, as containerd's cio does.
func fifo(t testing.TB, path string) *os.File {
	t.Helper()
	if err := unix.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// inNetns runs f on a thread in the network namespace at path.
func inNetns(t testing.TB, path string, f func() error) error {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// The thread is not unlocked: Go ends it with the goroutine, so
		// no other goroutine ever runs in the wrong namespace.
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- err
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			errc <- err
			return
		}
		errc <- f()
	}()
	return <-errc
}

func run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// network is the test's node and pod network namespaces
// (podenv.Network).
func network(t testing.TB) (nodeNS, podNS, podIP string) { return podenv.Network(t) }

// cgroupParent is the test pod's cgroup (podenv.CgroupParent).
func cgroupParent(t testing.TB) string { return podenv.CgroupParent(t) }

// cgroupDirs lists the cgroup dirs below the pod-level cgroup.
func cgroupDirs(parent string) []string {
	var found []string
	ctrls, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, c := range ctrls {
		entries, _ := os.ReadDir(filepath.Join(c, parent))
		for _, e := range entries {
			if e.IsDir() {
				found = append(found, filepath.Join(c, parent, e.Name()))
			}
		}
	}
	return found
}

func alive(pid int) bool { return pid > 0 && syscall.Kill(pid, 0) == nil }

func waitGone(pid int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for alive(pid) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	return !alive(pid)
}

func strconvItoa(i int) string { return fmt.Sprint(i) }

// killShimOnCleanup makes sure a test that fails half way does not leave
// the pod's shim running (a passing test has shut it down already).
func killShimOnCleanup(t testing.TB, ctx context.Context, connect func(context.Context, *taskAPI.ConnectRequest) (*taskAPI.ConnectResponse, error), id string) {
	t.Helper()
	if conn, err := connect(ctx, &taskAPI.ConnectRequest{ID: id}); err == nil {
		killOnCleanup(t, int(conn.ShimPid))
	}
}

func killOnCleanup(t testing.TB, pid int) {
	t.Cleanup(func() {
		if alive(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			waitGone(pid, 5*time.Second)
		}
	})
}
