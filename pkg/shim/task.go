package shim

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	eventstypes "github.com/containerd/containerd/api/events"
	taskAPI "github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/containerd/v2/pkg/protobuf"
	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/vmpod/vmpod/pkg/ocikeys"
	"github.com/vmpod/vmpod/pkg/podcgroup"
)

// task is one containerd task of the pod: its state machine and events;
// what it runs is its body, the sandbox or the VM.
type task struct {
	id     string
	bundle string
	st     *stateBox
	svc    *service
	body   body
	io     taskIO

	mu    sync.Mutex
	execs map[string]*execProcess // kubectl exec, in the VM task
}

// body is what a task runs. The task checks states and publishes events;
// the body does the work.
type body interface {
	// start runs it and returns the task's pid.
	start(ctx context.Context) (uint32, error)
	// kill signals it; created says it never started.
	kill(ctx context.Context, sig uint32, created bool) error
	// delete releases all it holds.
	delete(ctx context.Context) error
	pause(ctx context.Context) error
	resume(ctx context.Context) error
	// update applies new resources (the OCI LinuxResources).
	update(ctx context.Context, resources *anypb.Any) error
	// checkpoint writes its state into dir, an empty dir, and runs on.
	checkpoint(ctx context.Context, dir string) error
	stats(ctx context.Context) (*anypb.Any, error)
	closeStdin()
}

// sandboxBody is the pod sandbox: the shim itself stands for it, in the
// sandbox's cgroup, until the pod goes.
type sandboxBody struct{ t *task }

func (b sandboxBody) start(context.Context) (uint32, error) { return b.t.st.get().Pid, nil }

func (b sandboxBody) kill(_ context.Context, sig uint32, _ bool) error {
	b.t.onExit(128+sig, time.Now())
	return nil
}

func (b sandboxBody) delete(ctx context.Context) error { return b.t.svc.deleteSandbox(ctx, b.t) }

func (b sandboxBody) pause(context.Context) error {
	return fmt.Errorf("pausing the sandbox: %w", errdefs.ErrNotImplemented)
}

func (b sandboxBody) resume(context.Context) error {
	return fmt.Errorf("resuming the sandbox: %w", errdefs.ErrNotImplemented)
}

// update: pod-level limits are the kubelet's, on the pod cgroup.
func (b sandboxBody) update(context.Context, *anypb.Any) error { return nil }

func (b sandboxBody) checkpoint(context.Context, string) error {
	return fmt.Errorf("task %s is the pod sandbox, which holds no state: checkpoint the VM's container: %w", b.t.id, errdefs.ErrFailedPrecondition)
}

func (b sandboxBody) stats(context.Context) (*anypb.Any, error) {
	return nil, fmt.Errorf("task %s has no cgroup of its own: %w", b.t.id, errdefs.ErrNotFound)
}

func (b sandboxBody) closeStdin() {}

// isVM reports whether t runs the VM.
func (t *task) isVM() bool {
	_, ok := t.body.(*vmTask)
	return ok
}

// taskIO is the stdio containerd made for a task.
type taskIO struct {
	stdin, stdout, stderr string
	terminal              bool
}

func (s *service) create(ctx context.Context, r *taskAPI.CreateTaskRequest) (*task, error) {
	if r.Checkpoint != "" || r.ParentCheckpoint != "" {
		return nil, fmt.Errorf("restoring a VM from a checkpoint: %w", errdefs.ErrNotImplemented)
	}
	oci, err := readBundleSpec(r.Bundle)
	if err != nil {
		return nil, err
	}
	t := &task{id: r.ID, bundle: r.Bundle, st: newStateBox(), svc: s,
		io: taskIO{stdin: r.Stdin, stdout: r.Stdout, stderr: r.Stderr, terminal: r.Terminal}}
	if oci.Annotations[ocikeys.CRIContainerType] == ocikeys.CRIContainerTypeSbx {
		t.body = sandboxBody{t}
		return t, s.createSandbox(ctx, t, oci)
	}
	p := s.podFor(r.ID, nil)
	if other := s.otherVM(r.ID); other != "" {
		return nil, fmt.Errorf("spec.containers: a vmpod pod runs exactly one container, the VM, and %s is it: %w",
			other, errdefs.ErrInvalidArgument)
	}
	v, err := createVM(ctx, s.node, p, r, oci, t)
	if err != nil {
		return nil, err
	}
	t.body = v
	return t, nil
}

// podFor returns the pod, making it on first use: the sandbox task makes it
// with its own id; a VM task created without a sandbox (ctr run) makes a
// pod of its own.
func (s *service) podFor(id string, cgroup *podcgroup.Path) *pod {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pod == nil {
		s.pod = newPod(id, cgroup)
	}
	return s.pod
}

func (s *service) otherVM(id string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	for other, t := range s.tasks {
		if other != id && t != nil && t.isVM() {
			return other
		}
	}
	return ""
}

// createSandbox makes the pod: the shim enters the sandbox's cgroup (a
// directory or a systemd scope under the pod's), so that it is counted
// against the pod's limits from its first page, and starts port-forward's
// catcher.
func (s *service) createSandbox(ctx context.Context, t *task, oci *specs.Spec) error {
	var cg *podcgroup.Path
	if oci.Linux != nil && oci.Linux.CgroupsPath != "" {
		p, err := podcgroup.Parse(oci.Linux.CgroupsPath)
		if err != nil {
			return err
		}
		cg = &p
	}
	p := s.podFor(t.id, cg)
	if cg != nil {
		if _, err := podcgroup.Enter(*cg, os.Getpid(), podcgroup.Limits{}); err != nil {
			return err
		}
	}
	p.forwardLoopback(s.nodeNetns)
	return t.st.update(func(st state) (state, error) {
		st.Pid = uint32(os.Getpid())
		return st, nil
	})
}

// onExit records the VM's exit and tells containerd.
func (t *task) onExit(status uint32, at time.Time) {
	if t.st.stop(status, at) {
		st := t.st.get()
		t.svc.publish(&eventstypes.TaskExit{
			ContainerID: t.id, ID: t.id, Pid: st.Pid, ExitStatus: status, ExitedAt: protobuf.ToTimestamp(at),
		})
	}
}

func (t *task) start(ctx context.Context) (uint32, error) {
	if _, err := t.st.begin("starting", StatusCreated); err != nil {
		return 0, err
	}
	pid, err := t.body.start(ctx)
	t.st.end(func(s state) state {
		if err == nil && s.Status == StatusCreated {
			s.Status, s.Pid = StatusRunning, pid
		}
		return s
	})
	return pid, err
}

// kill: for the VM, SIGTERM and SIGINT press the ACPI power button and
// SIGKILL stops it hard; the sandbox just ends.
func (t *task) kill(ctx context.Context, sig uint32) error {
	st := t.st.get()
	if st.Status == StatusStopped {
		return nil
	}
	return t.body.kill(ctx, sig, st.Status == StatusCreated)
}

func (t *task) delete(ctx context.Context) (state, error) {
	st, err := t.st.begin("deleting", StatusCreated, StatusStopped)
	if err != nil {
		return st, err
	}
	t.endExecs()
	err = t.body.delete(ctx)
	t.st.end(nil)
	if st.Status == StatusCreated {
		st.ExitStatus, st.ExitedAt = 128+uint32(unix.SIGKILL), time.Now()
	}
	return st, err
}

// deleteSandbox has the node daemon release the pod: its dir and its
// QEMU uid, once its VM is removed.
func (s *service) deleteSandbox(ctx context.Context, t *task) error {
	return s.node.ReleasePod(ctx, t.id)
}

func (t *task) pause(ctx context.Context) error {
	if _, ok := t.body.(sandboxBody); ok {
		return t.body.pause(ctx)
	}
	if _, err := t.st.begin("pausing", StatusRunning); err != nil {
		return err
	}
	err := t.body.pause(ctx)
	t.st.end(func(s state) state {
		if err == nil && s.Status == StatusRunning {
			s.Status = StatusPaused
		}
		return s
	})
	return err
}

func (t *task) resume(ctx context.Context) error {
	if _, ok := t.body.(sandboxBody); ok {
		return t.body.resume(ctx)
	}
	if _, err := t.st.begin("resuming", StatusPaused); err != nil {
		return err
	}
	err := t.body.resume(ctx)
	t.st.end(func(s state) state {
		if err == nil && s.Status == StatusPaused {
			s.Status = StatusRunning
		}
		return s
	})
	return err
}

func (t *task) stats(ctx context.Context) (*anypb.Any, error) { return t.body.stats(ctx) }
