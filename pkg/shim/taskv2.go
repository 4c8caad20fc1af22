package shim

import (
	"context"
	"fmt"

	taskv2 "github.com/containerd/containerd/api/runtime/task/v2"
	taskAPI "github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/errdefs"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
)

// taskV2 serves containerd.task.v2.Task, the only task API containerd 1.7
// and CRI-O's runtime_type "vm" speak, on top of the one v3 service. The
// two are one shim.proto under two package names (the same messages with
// the same field numbers), so each call re-marshals its request into the
// v3 type, calls the v3 method and re-marshals the answer back: nothing is
// lost, and there is no second implementation to keep in step.
type taskV2 struct {
	v3 taskAPI.TTRPCTaskService
}

var _ taskv2.TTRPCTaskService = (*taskV2)(nil)

// relay calls a v3 method with a v2 request and returns its answer as Out2.
// Out2 comes first so that callers name only it; the rest is inferred.
func relay[Out2, In3, Out3 proto.Message](ctx context.Context, in proto.Message, call func(context.Context, In3) (Out3, error)) (Out2, error) {
	var zero Out2
	req, err := remarshal[In3](in)
	if err != nil {
		return zero, err
	}
	resp, err := call(ctx, req)
	if err != nil {
		return zero, err
	}
	return remarshal[Out2](resp)
}

// remarshal re-marshals a message into the other API version's type. Either
// both sides are the same shape or the build is wrong: a failure is
// internal, never the caller's.
func remarshal[To proto.Message](from proto.Message) (To, error) {
	var to To
	to = to.ProtoReflect().New().Interface().(To)
	b, err := proto.Marshal(from)
	if err == nil {
		err = proto.Unmarshal(b, to)
	}
	if err != nil {
		return to, fmt.Errorf("task API v2: %T to %T: %v: %w", from, to, err, errdefs.ErrInternal)
	}
	return to, nil
}

func (s *taskV2) State(ctx context.Context, r *taskv2.StateRequest) (*taskv2.StateResponse, error) {
	return relay[*taskv2.StateResponse](ctx, r, s.v3.State)
}

func (s *taskV2) Create(ctx context.Context, r *taskv2.CreateTaskRequest) (*taskv2.CreateTaskResponse, error) {
	return relay[*taskv2.CreateTaskResponse](ctx, r, s.v3.Create)
}

func (s *taskV2) Start(ctx context.Context, r *taskv2.StartRequest) (*taskv2.StartResponse, error) {
	return relay[*taskv2.StartResponse](ctx, r, s.v3.Start)
}

func (s *taskV2) Delete(ctx context.Context, r *taskv2.DeleteRequest) (*taskv2.DeleteResponse, error) {
	return relay[*taskv2.DeleteResponse](ctx, r, s.v3.Delete)
}

func (s *taskV2) Pids(ctx context.Context, r *taskv2.PidsRequest) (*taskv2.PidsResponse, error) {
	return relay[*taskv2.PidsResponse](ctx, r, s.v3.Pids)
}

func (s *taskV2) Pause(ctx context.Context, r *taskv2.PauseRequest) (*emptypb.Empty, error) {
	return relay[*emptypb.Empty](ctx, r, s.v3.Pause)
}

func (s *taskV2) Resume(ctx context.Context, r *taskv2.ResumeRequest) (*emptypb.Empty, error) {
	return relay[*emptypb.Empty](ctx, r, s.v3.Resume)
}

func (s *taskV2) Checkpoint(ctx context.Context, r *taskv2.CheckpointTaskRequest) (*emptypb.Empty, error) {
	return relay[*emptypb.Empty](ctx, r, s.v3.Checkpoint)
}

func (s *taskV2) Kill(ctx context.Context, r *taskv2.KillRequest) (*emptypb.Empty, error) {
	return relay[*emptypb.Empty](ctx, r, s.v3.Kill)
}

func (s *taskV2) Exec(ctx context.Context, r *taskv2.ExecProcessRequest) (*emptypb.Empty, error) {
	return relay[*emptypb.Empty](ctx, r, s.v3.Exec)
}

func (s *taskV2) ResizePty(ctx context.Context, r *taskv2.ResizePtyRequest) (*emptypb.Empty, error) {
	return relay[*emptypb.Empty](ctx, r, s.v3.ResizePty)
}

func (s *taskV2) CloseIO(ctx context.Context, r *taskv2.CloseIORequest) (*emptypb.Empty, error) {
	return relay[*emptypb.Empty](ctx, r, s.v3.CloseIO)
}

func (s *taskV2) Update(ctx context.Context, r *taskv2.UpdateTaskRequest) (*emptypb.Empty, error) {
	return relay[*emptypb.Empty](ctx, r, s.v3.Update)
}

func (s *taskV2) Wait(ctx context.Context, r *taskv2.WaitRequest) (*taskv2.WaitResponse, error) {
	return relay[*taskv2.WaitResponse](ctx, r, s.v3.Wait)
}

func (s *taskV2) Stats(ctx context.Context, r *taskv2.StatsRequest) (*taskv2.StatsResponse, error) {
	return relay[*taskv2.StatsResponse](ctx, r, s.v3.Stats)
}

func (s *taskV2) Connect(ctx context.Context, r *taskv2.ConnectRequest) (*taskv2.ConnectResponse, error) {
	return relay[*taskv2.ConnectResponse](ctx, r, s.v3.Connect)
}

func (s *taskV2) Shutdown(ctx context.Context, r *taskv2.ShutdownRequest) (*emptypb.Empty, error) {
	return relay[*emptypb.Empty](ctx, r, s.v3.Shutdown)
}
