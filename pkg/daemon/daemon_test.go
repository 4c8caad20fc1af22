package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
	specs "github.com/opencontainers/runtime-spec/specs-go"

	node "github.com/vmpod/vmpod/api/node/v1"
	"github.com/vmpod/vmpod/internal/testenv/podenv"
	"github.com/vmpod/vmpod/internal/testguest"
	"github.com/vmpod/vmpod/pkg/jail"
	nodepkg "github.com/vmpod/vmpod/pkg/node"
	"github.com/vmpod/vmpod/pkg/nodeclient"
	"github.com/vmpod/vmpod/pkg/vmd"
	"github.com/vmpod/vmpod/pkg/vmspec"
)

func TestMain(m *testing.M) {
	// libvirt starts this binary, through the jailer link, as the domain's
	// emulator: it is the jailer then, as vm-runtime is.
	if filepath.Base(os.Args[0]) == jail.EmulatorName {
		os.Exit(jail.Main(os.Args[1:]))
	}
	// TestServedPods starts it as a shim, by its command line.
	if filepath.Base(os.Args[0]) == "vm-runtime" && len(os.Args) > 1 && os.Args[1] == "shim" {
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// daemonProc is one daemon: the node's VMs served on a socket.
type daemonProc struct {
	stop   context.CancelFunc
	served chan error
	vms    *vmd.Service
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
		if _, err := os.Stat(sock); err == nil {
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("the node API never listened on %s", sock)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// close ends the daemon as a SIGKILL would for its VMs: libvirt let go,
// QEMU running on.
func (d *daemonProc) close(t *testing.T) {
	t.Helper()
	d.stop()
	if err := <-d.served; err != nil {
		t.Errorf("serve: %v", err)
	}
	if err := d.vms.Close(); err != nil {
		t.Errorf("close libvirt: %v", err)
	}
}

// lockedBuffer is a console's copy, read while it is written.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *lockedBuffer) waitFor(t *testing.T, marker string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if strings.Contains(l.String(), marker) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no %q on the console within %v; it says:\n%s", marker, d, l.String())
}

// TestNodeAPI drives a VM pod's life through the node API as a containerd
// shim will, through pkg/nodeclient, with the test guest under real QEMU:
// Create from an OCI spec, the console streamed from its first byte,
// Start, exec (a command, a missing program), stats and metrics; then the
// daemon stopped (a call meanwhile is Unavailable; a Wait and the console
// stream wait for it) and a new one started, which takes the running VM
// over (the same QEMU, exec works, the console resumes, saying where
// output may be lost); the ACPI shutdown ends the Wait begun before the
// restart with exit 0; Remove and ReleasePod leave nothing of the VM.
func TestNodeAPI(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root (namespaces, cgroups, QEMU's jail): run the tests as root, as make test does")
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
	c := nodeclient.New(sock)
	defer c.Close()
	defer func() {
		if d != nil {
			c.Remove(ctx, "vm1") //nolint:errcheck // cleanup after a failure
			d.close(t)
		}
	}()
	if err := c.Create(ctx, &node.CreateRequest{Id: "vm1", PodId: "pod1", Spec: []byte("{"), Bundle: bundle, Netns: podNS}); !errdefs.IsInvalidArgument(err) {
		t.Errorf("Create with a torn spec: %v, want InvalidArgument", err)
	}
	if err := c.Create(ctx, &node.CreateRequest{Id: "vm1", PodId: "pod1", Spec: specJSON, Bundle: bundle, Netns: podNS}); err != nil {
		t.Fatal(err)
	}
	var console lockedBuffer
	consoleDone := make(chan error, 1)
	go func() { consoleDone <- c.Console(ctx, "vm1", &console) }()
	pid, err := c.Start(ctx, "vm1")
	if err != nil {
		t.Fatal(err)
	}
	qemu := int(pid)
	if qemu <= 0 || syscall.Kill(qemu, 0) != nil {
		t.Fatalf("Start: QEMU pid %d does not run", qemu)
	}
	console.waitFor(t, "VMPOD-GUEST: ready", 4*time.Minute)

	exec := func(args ...string) (string, string, int32) {
		t.Helper()
		res, err := c.Exec(ctx, &node.ExecRequest{Id: "vm1", ExecId: fmt.Sprint(time.Now().UnixNano()), Args: args})
		if err != nil {
			t.Fatalf("exec %q: %v", args, err)
		}
		return string(res.Stdout), string(res.Stderr), res.ExitCode
	}
	if out, _, code := exec("echo", "hello from the guest"); code != 0 || out != "hello from the guest\n" {
		t.Errorf("exec echo: %q, exit %d", out, code)
	}
	if _, errOut, code := exec("/no/such/program"); code != 127 || !strings.Contains(errOut, "vmpod:") {
		t.Errorf("exec of a missing program: exit %d, stderr %q; want 127 and the reason", code, errOut)
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

	// The daemon goes; the VM stays, and so do the shim's Wait and
	// console; a new daemon takes the VM over.
	waited := make(chan *node.Exit, 1)
	go func() {
		exit, err := c.Wait(ctx, "vm1")
		if err != nil {
			t.Errorf("Wait across the daemon's restart: %v", err)
		}
		waited <- exit
	}()
	d.close(t)
	d = nil
	if syscall.Kill(qemu, 0) != nil {
		t.Fatal("QEMU went with the daemon")
	}
	if _, err := c.Get(ctx, "vm1"); !errdefs.IsUnavailable(err) {
		t.Errorf("a call while the daemon is away: %v, want Unavailable", err)
	}
	d = startDaemon(t, root, sock)
	vmRec, err := c.Get(ctx, "vm1")
	if err != nil || vmRec.State != string(vmd.Running) {
		t.Fatalf("after the restart: %v, %v; want vm1 running", vmRec, err)
	}
	if out, _, code := exec("echo", "again"); code != 0 || out != "again\n" {
		t.Errorf("exec after the restart: %q, exit %d", out, code)
	}

	if err := c.Shutdown(ctx, "vm1"); err != nil {
		t.Fatal(err)
	}
	select {
	case exit := <-waited:
		if exit == nil || exit.Status != 0 {
			t.Errorf("after the ACPI shutdown: exit %+v, want 0", exit)
		}
	case <-time.After(3 * time.Minute):
		t.Fatal("the VM did not stop within 3 minutes of the ACPI shutdown")
	}
	select {
	case err := <-consoleDone:
		if err != nil {
			t.Errorf("console: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("the console stream did not end with the VM")
	}
	text := console.String()
	t.Logf("console tail: %q", text[max(0, len(text)-400):])
	if strings.Count(text, "the node daemon restarted here") != 1 || !strings.Contains(text, "VMPOD-GUEST: poweroff") {
		t.Errorf("the console across the restart: want the boot, one note of the restart, then the power-off:\n%s", text)
	}
	if syscall.Kill(qemu, 0) == nil {
		t.Errorf("QEMU %d still runs after the exit", qemu)
	}
	if err := c.Remove(ctx, "vm1"); err != nil {
		t.Fatal(err)
	}
	if err := c.ReleasePod(ctx, "pod1"); err != nil {
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
	if _, err := c.Get(ctx, "vm1"); !errdefs.IsNotFound(err) {
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
