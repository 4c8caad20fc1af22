package shim

import (
	"context"
	"fmt"
	"os"
	"sync"

	eventstypes "github.com/containerd/containerd/api/events"
	taskv2 "github.com/containerd/containerd/api/runtime/task/v2"
	taskAPI "github.com/containerd/containerd/api/runtime/task/v3"
	tasktypes "github.com/containerd/containerd/api/types/task"
	"github.com/containerd/containerd/v2/core/runtime"
	"github.com/containerd/containerd/v2/pkg/protobuf"
	"github.com/containerd/containerd/v2/pkg/shim"
	"github.com/containerd/containerd/v2/pkg/shutdown"
	"github.com/containerd/containerd/v2/plugins"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/containerd/plugin"
	"github.com/containerd/plugin/registry"
	"github.com/containerd/ttrpc"
	"github.com/containerd/typeurl/v2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/vmpod/vmpod/pkg/nodeclient"
)

// register adds the task service to the shim's plugins; call it before
// shim.RunShim. node is the node's network namespace, for port-forward.
func register(cfg Config, node nodeNetns) {
	registry.Register(&plugin.Registration{
		Type:     plugins.TTRPCPlugin,
		ID:       "task",
		Requires: []plugin.Type{plugins.EventPlugin, plugins.InternalPlugin},
		InitFn: func(ic *plugin.InitContext) (any, error) {
			pp, err := ic.GetByID(plugins.EventPlugin, "publisher")
			if err != nil {
				return nil, err
			}
			sd, err := ic.GetByID(plugins.InternalPlugin, "shutdown")
			if err != nil {
				return nil, err
			}
			s := newService(ic.Context, cfg.withDefaults(), pp.(shim.Publisher), sd.(shutdown.Service))
			s.nodeNetns = node
			return s, nil
		},
	})
}

// service is the task API of one pod's shim.
type service struct {
	ctx       context.Context // namespaced; events are published with it
	cfg       Config
	publisher shim.Publisher
	shutdown  shutdown.Service
	nodeNetns nodeNetns // for port-forward (portforward.go)
	node      *nodeclient.Client

	mu    sync.Mutex
	tasks map[string]*task
	pod   *pod // made by the first Create
}

var (
	_ taskAPI.TTRPCTaskService      = (*service)(nil)
	_ shim.TTRPCService             = (*service)(nil)
	_ shim.TTRPCServerUnaryOptioner = (*service)(nil)
)

func newService(ctx context.Context, cfg Config, p shim.Publisher, sd shutdown.Service) *service {
	s := &service{ctx: ctx, cfg: cfg, publisher: p, shutdown: sd, tasks: map[string]*task{}, node: nodeclient.New(cfg.Socket)}
	sd.RegisterCallback(func(context.Context) error {
		if address, err := shim.ReadAddress("address"); err == nil {
			_ = shim.RemoveSocket(address)
		}
		return nil
	})
	return s
}

// RegisterTTRPC serves the task API, v3 for containerd 2.x and v2 (the
// same service through taskV2) for containerd 1.7 and CRI-O.
func (s *service) RegisterTTRPC(server *ttrpc.Server) error {
	taskAPI.RegisterTTRPCTaskService(server, s)
	taskv2.RegisterTTRPCTaskService(server, &taskV2{v3: s})
	return nil
}

// UnaryServerInterceptor maps errors to status codes for every call.
func (s *service) UnaryServerInterceptor() ttrpc.UnaryServerInterceptor { return errorInterceptor }

// publish sends an event to containerd. A failure is logged: containerd
// also learns task state by asking.
func (s *service) publish(event any) {
	ctx := context.WithoutCancel(s.ctx)
	if err := s.publisher.Publish(ctx, runtime.GetTopic(event), event); err != nil {
		log.G(ctx).WithError(err).Warnf("publish %T", event)
	}
}

func (s *service) get(id string) (*task, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.tasks[id]
	if !ok {
		return nil, fmt.Errorf("task %s: %w", id, errdefs.ErrNotFound)
	}
	return t, nil
}

func (s *service) State(ctx context.Context, r *taskAPI.StateRequest) (*taskAPI.StateResponse, error) {
	t, err := s.ready(r.ID)
	if err != nil {
		return nil, err
	}
	if r.ExecID != "" {
		e, err := t.getExec(r.ExecID)
		if err != nil {
			return nil, err
		}
		return e.state(r.ID), nil
	}
	st := t.st.get()
	return &taskAPI.StateResponse{
		ID: r.ID, Bundle: t.bundle, Pid: st.Pid, Status: apiStatus(st.Status),
		Stdin: t.io.stdin, Stdout: t.io.stdout, Stderr: t.io.stderr, Terminal: t.io.terminal,
		ExitStatus: st.ExitStatus, ExitedAt: protobuf.ToTimestamp(st.ExitedAt),
	}, nil
}

func apiStatus(s Status) tasktypes.Status {
	switch s {
	case StatusCreated:
		return tasktypes.Status_CREATED
	case StatusRunning:
		return tasktypes.Status_RUNNING
	case StatusPaused:
		return tasktypes.Status_PAUSED
	case StatusStopped:
		return tasktypes.Status_STOPPED
	default:
		return tasktypes.Status_UNKNOWN
	}
}

func (s *service) Create(ctx context.Context, r *taskAPI.CreateTaskRequest) (*taskAPI.CreateTaskResponse, error) {
	s.mu.Lock()
	if _, ok := s.tasks[r.ID]; ok {
		s.mu.Unlock()
		return nil, fmt.Errorf("task %s: %w", r.ID, errdefs.ErrAlreadyExists)
	}
	// Reserve the id; the slow work happens without the lock.
	s.tasks[r.ID] = nil
	s.mu.Unlock()

	t, err := s.create(ctx, r)
	s.mu.Lock()
	if err != nil {
		delete(s.tasks, r.ID)
	} else {
		s.tasks[r.ID] = t
	}
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	s.publish(&eventstypes.TaskCreate{
		ContainerID: r.ID, Bundle: r.Bundle, Rootfs: r.Rootfs,
		IO:  &eventstypes.TaskIO{Stdin: r.Stdin, Stdout: r.Stdout, Stderr: r.Stderr, Terminal: r.Terminal},
		Pid: t.st.get().Pid,
	})
	return &taskAPI.CreateTaskResponse{Pid: t.st.get().Pid}, nil
}

func (s *service) Start(ctx context.Context, r *taskAPI.StartRequest) (*taskAPI.StartResponse, error) {
	t, err := s.ready(r.ID)
	if err != nil {
		return nil, err
	}
	if r.ExecID != "" {
		e, err := t.getExec(r.ExecID)
		if err != nil {
			return nil, err
		}
		pid, err := e.start(ctx, s.publish)
		if err != nil {
			return nil, err
		}
		s.publish(&eventstypes.TaskExecStarted{ContainerID: r.ID, ExecID: r.ExecID, Pid: pid})
		return &taskAPI.StartResponse{Pid: pid}, nil
	}
	pid, err := t.start(ctx)
	if err != nil {
		return nil, err
	}
	s.publish(&eventstypes.TaskStart{ContainerID: r.ID, Pid: pid})
	return &taskAPI.StartResponse{Pid: pid}, nil
}

func (s *service) Delete(ctx context.Context, r *taskAPI.DeleteRequest) (*taskAPI.DeleteResponse, error) {
	t, err := s.ready(r.ID)
	if err != nil {
		return nil, err
	}
	if r.ExecID != "" {
		e, err := t.getExec(r.ExecID)
		if err != nil {
			return nil, err
		}
		st := e.state(r.ID)
		if st.Status != apiStatus(StatusStopped) && st.Status != apiStatus(StatusCreated) {
			return nil, fmt.Errorf("exec %s is running: %w", r.ExecID, errdefs.ErrFailedPrecondition)
		}
		t.removeExec(r.ExecID)
		return &taskAPI.DeleteResponse{Pid: st.Pid, ExitStatus: st.ExitStatus, ExitedAt: st.ExitedAt}, nil
	}
	if !t.isVM() && s.vmTaskLeft(r.ID) {
		return nil, fmt.Errorf("sandbox %s: delete the VM task first: %w", r.ID, errdefs.ErrFailedPrecondition)
	}
	st, err := t.delete(ctx)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	delete(s.tasks, r.ID)
	s.mu.Unlock()
	s.publish(&eventstypes.TaskDelete{
		ContainerID: r.ID, Pid: st.Pid, ExitStatus: st.ExitStatus, ExitedAt: protobuf.ToTimestamp(st.ExitedAt),
	})
	return &taskAPI.DeleteResponse{Pid: st.Pid, ExitStatus: st.ExitStatus, ExitedAt: protobuf.ToTimestamp(st.ExitedAt)}, nil
}

func (s *service) vmTaskLeft(sandboxID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, t := range s.tasks {
		if id != sandboxID && (t == nil || t.isVM()) {
			return true
		}
	}
	return false
}

func (s *service) Pids(ctx context.Context, r *taskAPI.PidsRequest) (*taskAPI.PidsResponse, error) {
	t, err := s.ready(r.ID)
	if err != nil {
		return nil, err
	}
	resp := &taskAPI.PidsResponse{}
	if pid := t.st.get().Pid; pid != 0 {
		resp.Processes = append(resp.Processes, &tasktypes.ProcessInfo{Pid: pid})
	}
	return resp, nil
}

func (s *service) Pause(ctx context.Context, r *taskAPI.PauseRequest) (*emptypb.Empty, error) {
	t, err := s.ready(r.ID)
	if err != nil {
		return nil, err
	}
	if err := t.pause(ctx); err != nil {
		return nil, err
	}
	s.publish(&eventstypes.TaskPaused{ContainerID: r.ID})
	return &emptypb.Empty{}, nil
}

func (s *service) Resume(ctx context.Context, r *taskAPI.ResumeRequest) (*emptypb.Empty, error) {
	t, err := s.ready(r.ID)
	if err != nil {
		return nil, err
	}
	if err := t.resume(ctx); err != nil {
		return nil, err
	}
	s.publish(&eventstypes.TaskResumed{ContainerID: r.ID})
	return &emptypb.Empty{}, nil
}

// Checkpoint writes the VM's state (vm.VM.Checkpoint's files) into
// r.Path, the empty dir containerd made, which containerd then archives;
// the VM runs on. containerd pauses the task around the call, and the
// guest runs for a moment inside it: its disk takes writes again only
// once it does. Options are runc's (CRIU's), which a VM has no use for.
func (s *service) Checkpoint(ctx context.Context, r *taskAPI.CheckpointTaskRequest) (*emptypb.Empty, error) {
	t, err := s.ready(r.ID)
	if err != nil {
		return nil, err
	}
	if r.Options != nil && len(r.Options.GetValue()) > 0 {
		return nil, fmt.Errorf("checkpoint task %s: options of type %s: a VM's checkpoint takes none: %w", r.ID, r.Options.GetTypeUrl(), errdefs.ErrInvalidArgument)
	}
	if err := t.body.checkpoint(ctx, r.Path); err != nil {
		return nil, err
	}
	return &emptypb.Empty{}, nil
}

func (s *service) Kill(ctx context.Context, r *taskAPI.KillRequest) (*emptypb.Empty, error) {
	t, err := s.ready(r.ID)
	if err != nil {
		return nil, err
	}
	if r.ExecID != "" {
		e, err := t.getExec(r.ExecID)
		if err != nil {
			return nil, err
		}
		e.kill(r.Signal, s.publish, true)
		return &emptypb.Empty{}, nil
	}
	if err := t.kill(ctx, r.Signal); err != nil {
		return nil, err
	}
	return &emptypb.Empty{}, nil
}

// Exec adds a command to run in the VM's guest through the QEMU guest
// agent (kubectl exec, exec probes); Start runs it.
func (s *service) Exec(ctx context.Context, r *taskAPI.ExecProcessRequest) (*emptypb.Empty, error) {
	t, err := s.ready(r.ID)
	if err != nil {
		return nil, err
	}
	if _, err := t.addExec(r); err != nil {
		return nil, err
	}
	s.publish(&eventstypes.TaskExecAdded{ContainerID: r.ID, ExecID: r.ExecID})
	return &emptypb.Empty{}, nil
}

// ResizePty is accepted and ignored: a serial console has no window size.
func (s *service) ResizePty(ctx context.Context, r *taskAPI.ResizePtyRequest) (*emptypb.Empty, error) {
	if _, err := s.get(r.ID); err != nil {
		return nil, err
	}
	return &emptypb.Empty{}, nil
}

func (s *service) CloseIO(ctx context.Context, r *taskAPI.CloseIORequest) (*emptypb.Empty, error) {
	t, err := s.ready(r.ID)
	if err != nil {
		return nil, err
	}
	// An exec's stdin ends when containerd closes its FIFO's writer.
	if r.Stdin && r.ExecID == "" {
		t.body.closeStdin()
	}
	return &emptypb.Empty{}, nil
}

func (s *service) Update(ctx context.Context, r *taskAPI.UpdateTaskRequest) (*emptypb.Empty, error) {
	t, err := s.ready(r.ID)
	if err != nil {
		return nil, err
	}
	var res specs.LinuxResources
	if r.Resources != nil {
		if err := typeurl.UnmarshalTo(r.Resources, &res); err != nil {
			return nil, fmt.Errorf("task %s: resources: %v: %w", r.ID, err, errdefs.ErrInvalidArgument)
		}
	}
	if err := t.body.update(ctx, r.Resources); err != nil {
		return nil, err
	}
	return &emptypb.Empty{}, nil
}

func (s *service) Wait(ctx context.Context, r *taskAPI.WaitRequest) (*taskAPI.WaitResponse, error) {
	t, err := s.ready(r.ID)
	if err != nil {
		return nil, err
	}
	if r.ExecID != "" {
		e, err := t.getExec(r.ExecID)
		if err != nil {
			return nil, err
		}
		return e.wait(ctx)
	}
	select {
	case <-t.st.exited:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	st := t.st.get()
	return &taskAPI.WaitResponse{ExitStatus: st.ExitStatus, ExitedAt: protobuf.ToTimestamp(st.ExitedAt)}, nil
}

func (s *service) Stats(ctx context.Context, r *taskAPI.StatsRequest) (*taskAPI.StatsResponse, error) {
	t, err := s.ready(r.ID)
	if err != nil {
		return nil, err
	}
	data, err := t.stats(ctx)
	if err != nil {
		return nil, err
	}
	return &taskAPI.StatsResponse{Stats: data}, nil
}

func (s *service) Connect(ctx context.Context, r *taskAPI.ConnectRequest) (*taskAPI.ConnectResponse, error) {
	resp := &taskAPI.ConnectResponse{ShimPid: uint32(os.Getpid())}
	if t, err := s.get(r.ID); err == nil && t != nil {
		resp.TaskPid = t.st.get().Pid
	}
	return resp, nil
}

// Shutdown ends the shim once its pod has no tasks left; containerd calls
// it after every Delete.
func (s *service) Shutdown(ctx context.Context, r *taskAPI.ShutdownRequest) (*emptypb.Empty, error) {
	s.mu.Lock()
	n := len(s.tasks)
	p := s.pod
	s.mu.Unlock()
	if n > 0 {
		return &emptypb.Empty{}, nil
	}
	if p != nil {
		p.close()
		p.leaveCgroup()
	}
	s.node.Close()
	s.shutdown.Shutdown()
	return &emptypb.Empty{}, nil
}

// ready is the task id once created; every request but Create and Delete
// is answered "not ready" (FailedPrecondition) while its Create runs.
func (s *service) ready(id string) (*task, error) {
	t, err := s.get(id)
	if err != nil {
		return nil, err
	}
	if t == nil {
		return nil, fmt.Errorf("task %s is being created: %w", id, errdefs.ErrFailedPrecondition)
	}
	return t, nil
}
