package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"github.com/containerd/ttrpc"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	node "github.com/vmpod/vmpod/api/node/v1"
	"github.com/vmpod/vmpod/internal/testenv/podenv"
	"github.com/vmpod/vmpod/internal/testguest"
	"github.com/vmpod/vmpod/pkg/jail"
	nodepkg "github.com/vmpod/vmpod/pkg/node"
	"github.com/vmpod/vmpod/pkg/vmd"
	"github.com/vmpod/vmpod/pkg/vmspec"
)

func TestMain(m *testing.M) {
	// libvirt starts this binary, through the jailer link, as the domain's
	// emulator: it is the jailer then, as vm-runtime is.
	if filepath.Base(os.Args[0]) == jail.EmulatorName {
		os.Exit(jail.Main(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// daemonProc is one daemon: the node's VMs served on a socket.
type daemonProc struct {
	stop   context.CancelFunc
	served chan error
	vms    *vmd.Service
	client node.VMsClient
	conn   net.Conn
}

func startDaemon(t *testing.T, root, sock string) *daemonProc {
	t.Helper()
	vms, err := vmd.New(vmd.Config{StateRoot: root, CapsCache: filepath.Join(root, "caps"), KVMCache: nodepkg.DefaultKVMCache})
	if err != nil {
		t.Fatal(err)
	}
	s := New(vms)
	ctx, cancel := context.WithCancel(context.Background())
	s.Recover(ctx)
	d := &daemonProc{stop: cancel, served: make(chan error, 1), vms: vms}
	go func() { d.served <- s.Serve(ctx, sock) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if d.conn, err = net.Dial("unix", sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the node API never listened on %s: %v", sock, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	d.client = node.NewVMsClient(ttrpc.NewClient(d.conn))
	return d
}

// close ends the daemon as a SIGKILL would for its VMs: libvirt let go,
// QEMU running on.
func (d *daemonProc) close(t *testing.T) {
	t.Helper()
	d.conn.Close()
	d.stop()
	if err := <-d.served; err != nil {
		t.Errorf("serve: %v", err)
	}
	if err := d.vms.Close(); err != nil {
		t.Errorf("close libvirt: %v", err)
	}
}

// consoleReader keeps what the Console stream sent.
type consoleReader struct {
	mu     sync.Mutex
	text   strings.Builder
	epoch  string
	offset uint64
	err    error
	done   chan struct{}
}

func readConsole(ctx context.Context, c node.VMsClient, id, epoch string, offset uint64) *consoleReader {
	r := &consoleReader{done: make(chan struct{}), epoch: epoch, offset: offset}
	go func() {
		defer close(r.done)
		st, err := c.Console(ctx, &node.ConsoleRequest{Id: id, Epoch: epoch, Offset: offset})
		for err == nil {
			var chunk *node.ConsoleChunk
			if chunk, err = st.Recv(); err == nil {
				r.mu.Lock()
				r.text.Write(chunk.Data)
				r.epoch, r.offset = chunk.Epoch, chunk.Offset
				r.mu.Unlock()
			}
		}
		if !errors.Is(err, io.EOF) {
			r.mu.Lock()
			r.err = err
			r.mu.Unlock()
		}
	}()
	return r
}

func (r *consoleReader) waitFor(t *testing.T, marker string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		r.mu.Lock()
		found := strings.Contains(r.text.String(), marker)
		r.mu.Unlock()
		if found {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	t.Fatalf("no %q on the console within %v (stream error %v); it says:\n%s", marker, d, r.err, r.text.String())
}

// TestNodeAPI drives a VM pod's life through the node API as a containerd
// shim would, with the test guest under real QEMU: Create from an OCI
// spec, the console streamed from its first byte, Start, exec (a command,
// a missing program), stats, then the daemon stopped and a new one
// started, which takes the running VM over (the same QEMU, exec works,
// the console streams again); the ACPI shutdown, the exit, Remove and
// ReleasePod; nothing of the VM is left.
func TestNodeAPI(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: namespaces, cgroups, QEMU's jail")
	}
	ctx := context.Background()
	// Unix socket paths must stay under 108 bytes: keep the root short.
	root, err := os.MkdirTemp("/tmp", "vmpod-d-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	sock := filepath.Join(root, "vmd.sock")
	_, podNS, _ := podenv.Network(t)
	cg := podenv.CgroupParent(t)

	bundle := filepath.Join(root, "bundles", "vm1")
	if err := os.MkdirAll(bundle, 0o700); err != nil {
		t.Fatal(err)
	}
	testguest.Rootfs(t, bundle)
	mem, quota, period, adj := int64(256<<20), int64(100000), uint64(100000), 500
	spec := &specs.Spec{
		Version: specs.Version, Root: &specs.Root{Path: "rootfs"},
		Annotations: map[string]string{
			vmspec.CRIContainerType: vmspec.CRIContainerTypeCntr, vmspec.CRIContainerName: "vm",
			vmspec.CRIImageName: testguest.Image, vmspec.CRISandboxID: "pod1",
			vmspec.CRISandboxName: "web", vmspec.CRISandboxNamespace: "default", vmspec.CRISandboxUID: "uid-1",
		},
		Process: &specs.Process{OOMScoreAdj: &adj},
		Mounts:  []specs.Mount{{Destination: "/etc/resolv.conf", Source: "/dev/null", Type: "bind"}},
		Linux: &specs.Linux{
			CgroupsPath: cg + "/vm1",
			Resources:   &specs.LinuxResources{CPU: &specs.LinuxCPU{Quota: &quota, Period: &period}, Memory: &specs.LinuxMemory{Limit: &mem}},
		},
	}
	specJSON, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}

	d := startDaemon(t, root, sock)
	defer func() {
		if d != nil {
			d.client.Remove(ctx, &node.IDRequest{Id: "vm1"}) //nolint:errcheck // cleanup after a failure
			d.close(t)
		}
	}()
	if _, err := d.client.Create(ctx, &node.CreateRequest{Id: "vm1", PodId: "pod1", Spec: []byte("{"), Bundle: bundle, Netns: podNS}); !errdefs.IsInvalidArgument(errgrpc.ToNative(err)) {
		t.Errorf("Create with a torn spec: %v, want InvalidArgument", err)
	}
	if _, err := d.client.Create(ctx, &node.CreateRequest{Id: "vm1", PodId: "pod1", Spec: specJSON, Bundle: bundle, Netns: podNS}); err != nil {
		t.Fatal(err)
	}
	cctx, cancelConsole := context.WithCancel(ctx)
	defer cancelConsole()
	console := readConsole(cctx, d.client, "vm1", "", 0)
	started, err := d.client.Start(ctx, &node.IDRequest{Id: "vm1"})
	if err != nil {
		t.Fatal(err)
	}
	qemu := int(started.Pid)
	if qemu <= 0 || syscall.Kill(qemu, 0) != nil {
		t.Fatalf("Start: QEMU pid %d does not run", qemu)
	}
	console.waitFor(t, "VMPOD-GUEST: ready", 4*time.Minute)

	exec := func(c node.VMsClient, args ...string) (string, string, int32) {
		t.Helper()
		st, err := c.Exec(ctx, &node.ExecRequest{Id: "vm1", ExecId: fmt.Sprint(time.Now().UnixNano()), Args: args})
		if err != nil {
			t.Fatalf("exec %q: %v", args, err)
		}
		var stdout, stderr strings.Builder
		for {
			out, err := st.Recv()
			if err != nil {
				t.Fatalf("exec %q: %v", args, err)
			}
			stdout.Write(out.Stdout)
			stderr.Write(out.Stderr)
			if out.Exited {
				return stdout.String(), stderr.String(), out.ExitCode
			}
		}
	}
	if out, _, code := exec(d.client, "echo", "hello from the guest"); code != 0 || out != "hello from the guest\n" {
		t.Errorf("exec echo: %q, exit %d", out, code)
	}
	if _, errOut, code := exec(d.client, "/no/such/program"); code != 127 || !strings.Contains(errOut, "vmpod:") {
		t.Errorf("exec of a missing program: exit %d, stderr %q; want 127 and the reason", code, errOut)
	}
	if st, err := d.client.Stats(ctx, &node.IDRequest{Id: "vm1"}); err != nil || st.Stats == nil {
		t.Errorf("Stats: %v, %v", st, err)
	}
	metrics := scrape(t, d.vms)
	for _, want := range []string{
		`vmpod_vm_info{domain="default_web",id="vm1",namespace="default",pod="web",state="running"} 1`,
		`vmpod_vms{state="running"} 1`,
		`vmpod_vm_starts_total{result="ok"} 1`,
		`vmpod_vm_start_phase_seconds_count{phase="qemu"} 1`,
		`vmpod_exec_duration_seconds_count{result="ran"} 1`,
		`vmpod_exec_duration_seconds_count{result="failed"} 1`,
		`vmpod_vm_guest_memory_bytes{namespace="default",pod="web"} 2.68435456e+08`,
	} {
		if !strings.Contains(metrics, "\n"+want+"\n") {
			t.Errorf("no %s in the metrics:\n%s", want, metrics)
		}
	}
	if !regexp.MustCompile(`\nvmpod_vm_memory_usage_bytes\{namespace="default",pod="web"\} [1-9]`).MatchString(metrics) {
		t.Errorf("no memory usage of the running VM in the metrics:\n%s", metrics)
	}

	// The daemon goes; the VM stays and a new daemon takes it over.
	cancelConsole()
	<-console.done
	d.close(t)
	d = nil
	if syscall.Kill(qemu, 0) != nil {
		t.Fatal("QEMU went with the daemon")
	}
	d = startDaemon(t, root, sock)
	vmRec, err := d.client.Get(ctx, &node.IDRequest{Id: "vm1"})
	if err != nil || vmRec.State != string(vmd.Running) {
		t.Fatalf("after the restart: %v, %v; want vm1 running", vmRec, err)
	}
	if out, _, code := exec(d.client, "echo", "again"); code != 0 || out != "again\n" {
		t.Errorf("exec after the restart: %q, exit %d", out, code)
	}
	console = readConsole(ctx, d.client, "vm1", console.epoch, console.offset)

	if _, err := d.client.Shutdown(ctx, &node.IDRequest{Id: "vm1"}); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	exit, err := d.client.Wait(wctx, &node.IDRequest{Id: "vm1"})
	if err != nil {
		t.Fatal(err)
	}
	if exit.Status != 0 {
		t.Errorf("after the ACPI shutdown: exit %+v, want 0", exit)
	}
	select {
	case <-console.done:
	case <-time.After(10 * time.Second):
		t.Error("the console stream did not end with the VM")
	}
	if strings.Contains(console.text.String(), "hello from the guest") {
		t.Error("the new daemon's console repeated output from before the restart")
	}
	if syscall.Kill(qemu, 0) == nil {
		t.Errorf("QEMU %d still runs after the exit", qemu)
	}
	if _, err := d.client.Remove(ctx, &node.IDRequest{Id: "vm1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.client.ReleasePod(ctx, &node.ReleasePodRequest{PodId: "pod1"}); err != nil {
		t.Fatal(err)
	}
	metrics = scrape(t, d.vms)
	for _, want := range []string{
		`vmpod_vm_recoveries_total{result="adopted"} 1`,
		`vmpod_vm_exits_total{reason="Completed"} 1`,
		`vmpod_vms{state="running"} 0`,
	} {
		if !strings.Contains(metrics, "\n"+want+"\n") {
			t.Errorf("no %s in the restarted daemon's metrics:\n%s", want, metrics)
		}
	}
	if _, err := d.client.Get(ctx, &node.IDRequest{Id: "vm1"}); !errdefs.IsNotFound(errgrpc.ToNative(err)) {
		t.Errorf("Get after Remove: %v, want NotFound", err)
	}
	for _, p := range []string{filepath.Join(root, "pods", "pod1"), filepath.Join(root, "vms", "vm1.json")} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is left: %v", p, err)
		}
	}
}

// scrape is what the node's metrics endpoint serves now.
func scrape(t *testing.T, vms *vmd.Service) string {
	t.Helper()
	rec := httptest.NewRecorder()
	vms.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("GET /metrics: %d %s", rec.Code, rec.Body)
	}
	return rec.Body.String()
}
