package shim

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	taskv2 "github.com/containerd/containerd/api/runtime/task/v2"
	taskAPI "github.com/containerd/containerd/api/runtime/task/v3"
	tasktypes "github.com/containerd/containerd/api/types/task"
	"github.com/containerd/containerd/v2/core/events"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/protobuf"
	"github.com/containerd/containerd/v2/pkg/shutdown"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"github.com/containerd/ttrpc"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/anypb"
)

// TestRemarshalV2V3 checks that a v2 message survives the trip to its v3
// twin and back with every field, including Any payloads and nested types.
func TestRemarshalV2V3(t *testing.T) {
	now := protobuf.ToTimestamp(time.Unix(1700000000, 42))
	opts := &anypb.Any{TypeUrl: "types.containerd.io/opencontainers/runtime-spec/1/LinuxResources", Value: []byte{1, 2, 3}}
	tests := []struct {
		name string
		v2   proto.Message
		v3   func(proto.Message) (proto.Message, error)
	}{
		{"CreateTaskRequest", &taskv2.CreateTaskRequest{
			ID: "vm", Bundle: "/b", Stdin: "/in", Stdout: "/out", Terminal: true,
			Checkpoint: "/cp", Options: opts,
		}, to[*taskAPI.CreateTaskRequest]()},
		{"StateResponse", &taskv2.StateResponse{
			ID: "vm", Bundle: "/b", Pid: 7, Status: tasktypes.Status_RUNNING, ExitStatus: 3, ExitedAt: now,
		}, to[*taskAPI.StateResponse]()},
		{"KillRequest", &taskv2.KillRequest{ID: "vm", Signal: 15, All: true}, to[*taskAPI.KillRequest]()},
		{"UpdateTaskRequest", &taskv2.UpdateTaskRequest{ID: "vm", Resources: opts, Annotations: map[string]string{"a": "b"}}, to[*taskAPI.UpdateTaskRequest]()},
		{"PidsResponse", &taskv2.PidsResponse{Processes: []*tasktypes.ProcessInfo{{Pid: 9, Info: opts}}}, to[*taskAPI.PidsResponse]()},
		{"WaitResponse", &taskv2.WaitResponse{ExitStatus: 137, ExitedAt: now}, to[*taskAPI.WaitResponse]()},
		{"ConnectResponse", &taskv2.ConnectResponse{ShimPid: 1, TaskPid: 2, Version: "v"}, to[*taskAPI.ConnectResponse]()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v3, err := tc.v3(tc.v2)
			if err != nil {
				t.Fatal(err)
			}
			back := tc.v2.ProtoReflect().New().Interface()
			b, err := proto.Marshal(v3)
			if err != nil {
				t.Fatal(err)
			}
			if err := proto.Unmarshal(b, back); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.v2, back, protocmp.Transform()); diff != "" {
				t.Errorf("v2 -> v3 -> v2 (-want +got):\n%s", diff)
			}
			if v3.ProtoReflect().Descriptor().FullName().Parent() != "containerd.task.v3" {
				t.Errorf("converted to %s, want a containerd.task.v3 message", v3.ProtoReflect().Descriptor().FullName())
			}
		})
	}
}

// TestTaskV2OverTTRPC drives the real task service with containerd 1.7's
// client (containerd.task.v2.Task) over ttrpc, next to the v3 service on
// the same server: answers come back whole and errors keep their class.
func TestTaskV2OverTTRPC(t *testing.T) {
	dir := t.TempDir()
	ctx := namespaces.WithNamespace(context.Background(), "k8s.io")
	svcCtx, sd := shutdown.WithShutdown(ctx)
	svc := newService(svcCtx, Config{StateRoot: dir}.withDefaults(), nopPublisher{}, sd)
	server, err := ttrpc.NewServer(ttrpc.WithUnaryServerInterceptor(svc.UnaryServerInterceptor()))
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.RegisterTTRPC(server); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "s")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = server.Serve(ctx, l) }()
	t.Cleanup(func() { server.Close() })
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	client := ttrpc.NewClient(conn)
	t.Cleanup(func() { client.Close() })
	v2 := taskv2.NewTTRPCTaskClient(client)
	v3 := taskAPI.NewTTRPCTaskClient(client)

	got, err := v2.Connect(ctx, &taskv2.ConnectRequest{ID: "sbx"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&taskv2.ConnectResponse{ShimPid: uint32(os.Getpid())}, got, protocmp.Transform()); diff != "" {
		t.Errorf("v2 Connect (-want +got):\n%s", diff)
	}
	if _, err := v3.Connect(ctx, &taskAPI.ConnectRequest{ID: "sbx"}); err != nil {
		t.Errorf("v3 Connect next to v2: %v", err)
	}

	bad := filepath.Join(dir, "bad")
	if err := os.MkdirAll(bad, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bad, "config.json"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	errTests := []struct {
		name string
		call func() error
		want error
	}{
		{"State of an unknown task", func() error {
			_, err := v2.State(ctx, &taskv2.StateRequest{ID: "nope"})
			return err
		}, errdefs.ErrNotFound},
		{"Create from a checkpoint (the field crosses over)", func() error {
			_, err := v2.Create(ctx, &taskv2.CreateTaskRequest{ID: "sbx", Bundle: bad, Checkpoint: "/cp"})
			return err
		}, errdefs.ErrNotImplemented},
		{"Create from a broken bundle", func() error {
			_, err := v2.Create(ctx, &taskv2.CreateTaskRequest{ID: "sbx", Bundle: bad})
			return err
		}, errdefs.ErrInvalidArgument},
		{"Exec in a task that does not exist", func() error {
			_, err := v2.Exec(ctx, &taskv2.ExecProcessRequest{ID: "sbx", ExecID: "e"})
			return err
		}, errdefs.ErrNotFound},
	}
	for _, tc := range errTests {
		t.Run(tc.name, func(t *testing.T) {
			err := errgrpc.ToNative(tc.call())
			if !errors.Is(err, tc.want) {
				t.Errorf("got %v, want class %v", err, tc.want)
			}
		})
	}

	if _, err := v2.Shutdown(ctx, &taskv2.ShutdownRequest{ID: "sbx"}); err != nil {
		t.Fatalf("v2 Shutdown: %v", err)
	}
	select {
	case <-sd.Done():
	case <-time.After(5 * time.Second):
		t.Error("v2 Shutdown of a shim without tasks did not shut it down")
	}
}

type nopPublisher struct{}

func (nopPublisher) Publish(context.Context, string, events.Event) error { return nil }
func (nopPublisher) Close() error                                        { return nil }

// to is remarshal into T, as a value for the table.
func to[T proto.Message]() func(proto.Message) (proto.Message, error) {
	return func(m proto.Message) (proto.Message, error) { return remarshal[T](m) }
}
