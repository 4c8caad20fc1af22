package shim_test

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	taskv2 "github.com/containerd/containerd/api/runtime/task/v2"
	runcoptions "github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/containerd/api/types/task"
	"github.com/containerd/ttrpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// startLegacy runs the shim's start command as containerd 1.7's
// runtime/v2/shim.Command does (and CRI-O's runtime_type "vm" through it):
// -publish-binary, MAX_SHIM_VERSION=2, stdin empty or the runtime options,
// and stdout and stderr read together. It returns that output.
func (e shimEnv) startLegacy(t testing.TB, id, bundle string, stdin []byte) string {
	t.Helper()
	cmd := exec.Command(e.bin, "-namespace", "k8s.io", "-address", filepath.Join(e.state, "containerd.sock"),
		"-publish-binary", "/usr/bin/containerd", "-id", id, "start")
	cmd.Dir, cmd.Env = bundle, append(e.environ(), "MAX_SHIM_VERSION=2", "GOMAXPROCS=2")
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("legacy shim start: %v: %s", err, out)
	}
	return string(bytes.TrimSpace(out))
}

func dialV2(t testing.TB, addr string) taskv2.TTRPCTaskService {
	t.Helper()
	conn, err := net.Dial("unix", strings.TrimPrefix(addr, "unix://"))
	if err != nil {
		t.Fatal(err)
	}
	c := ttrpc.NewClient(conn)
	t.Cleanup(func() { c.Close() })
	return taskv2.NewTTRPCTaskClient(c)
}

// TestShimLegacyStart plays containerd 1.7 against the real shim binary:
// the start command answers the bare socket address (what 1.7 and every
// CRI-O read as version 2 over ttrpc) and leaves it in the bundle's address
// file; a second task of the pod, started with runtime options on stdin,
// gets the same shim; the sandbox task runs and goes away over task API
// v2; and the shim exits, leaving nothing.
func TestShimLegacyStart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := newPodEnv(t)

	addr := e.env.startLegacy(t, e.p.sandboxID, e.p.sandboxBundle, nil)
	if !strings.HasPrefix(addr, "unix://") || strings.ContainsAny(addr, "{\n") {
		t.Fatalf("start answered %q, want a bare unix:// address", addr)
	}
	if b, err := os.ReadFile(filepath.Join(e.p.sandboxBundle, "address")); err != nil || string(b) != addr {
		t.Errorf("bundle address file = %q, %v; want %q", b, err, addr)
	}
	c := dialV2(t, addr)
	if conn, err := c.Connect(ctx, &taskv2.ConnectRequest{ID: e.p.sandboxID}); err == nil {
		killOnCleanup(t, int(conn.ShimPid))
	}
	if _, err := c.Create(ctx, &taskv2.CreateTaskRequest{ID: e.p.sandboxID, Bundle: e.p.sandboxBundle}); err != nil {
		t.Fatalf("v2 create sandbox: %v", err)
	}
	if _, err := c.Start(ctx, &taskv2.StartRequest{ID: e.p.sandboxID}); err != nil {
		t.Fatalf("v2 start sandbox: %v", err)
	}
	st, err := c.State(ctx, &taskv2.StateRequest{ID: e.p.sandboxID})
	if err != nil || st.Status != task.Status_RUNNING || st.Bundle != e.p.sandboxBundle {
		t.Fatalf("v2 State = %v, %v; want running in %s", st, err, e.p.sandboxBundle)
	}

	opts, err := anypb.New(&runcoptions.Options{BinaryName: "x"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := proto.Marshal(opts)
	if err != nil {
		t.Fatal(err)
	}
	if again := e.env.startLegacy(t, e.p.vmID, e.p.vmBundle, b); again != addr {
		t.Errorf("second task got %q, want the pod's shim %q", again, addr)
	}

	if _, err := c.Kill(ctx, &taskv2.KillRequest{ID: e.p.sandboxID, Signal: uint32(syscall.SIGKILL), All: true}); err != nil {
		t.Fatalf("v2 kill sandbox: %v", err)
	}
	if _, err := c.Wait(ctx, &taskv2.WaitRequest{ID: e.p.sandboxID}); err != nil {
		t.Fatalf("v2 wait sandbox: %v", err)
	}
	if _, err := c.Delete(ctx, &taskv2.DeleteRequest{ID: e.p.sandboxID}); err != nil {
		t.Fatalf("v2 delete sandbox: %v", err)
	}
	conn, err := c.Connect(ctx, &taskv2.ConnectRequest{ID: e.p.sandboxID})
	if err != nil {
		t.Fatalf("v2 connect: %v", err)
	}
	_, _ = c.Shutdown(ctx, &taskv2.ShutdownRequest{ID: e.p.sandboxID})
	e.env.delete(t, e.p.sandboxID, e.p.sandboxBundle)
	if !waitGone(int(conn.ShimPid), 10*time.Second) {
		t.Errorf("shim %d still runs after Shutdown", conn.ShimPid)
	}
	e.assertClean(t)
	for _, topic := range []string{"/tasks/create", "/tasks/start", "/tasks/delete"} {
		if !e.fc.seen(topic) {
			t.Errorf("containerd got no %s event", topic)
		}
	}
}
