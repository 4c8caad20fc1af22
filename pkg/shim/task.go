package shim

import (
	"context"
	"fmt"
	"os"
	"time"

	eventstypes "github.com/containerd/containerd/api/events"
	taskAPI "github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/containerd/v2/pkg/protobuf"
	"github.com/containerd/errdefs"
	"github.com/containerd/typeurl/v2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/vmpod/vmpod/pkg/podcgroup"
	"github.com/vmpod/vmpod/pkg/vmspec"
)

type kind int

const (
	kindSandbox kind = iota
	kindVM
)

// task is one containerd task of the pod: the sandbox, or the VM.
type task struct {
	id     string
	bundle string
	kind   kind
	st     *stateBox
	svc    *service
	vm     *vmTask // kindVM only
	io     taskIO
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
	if oci.Annotations[vmspec.CRIContainerType] == vmspec.CRIContainerTypeSbx {
		t.kind = kindSandbox
		return t, s.createSandbox(ctx, t, oci)
	}
	t.kind = kindVM
	p, err := s.podFor(r.ID, nil)
	if err != nil {
		return nil, err
	}
	if other := s.otherVM(r.ID); other != "" {
		return nil, fmt.Errorf("spec.containers: a vmpod pod runs exactly one container, the VM, and %s is it: %w",
			other, errdefs.ErrInvalidArgument)
	}
	t.vm, err = createVM(ctx, p, r, oci, t)
	if err != nil {
		return nil, err
	}
	return t, nil
}

// podFor returns the pod, making it on first use: the sandbox task makes it
// with its own id; a VM task created without a sandbox (ctr run) makes a
// pod of its own.
func (s *service) podFor(id string, cgroup *podcgroup.Path) (*pod, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pod != nil {
		return s.pod, nil
	}
	p, err := newPod(s.cfg, id, cgroup)
	if err != nil {
		return nil, err
	}
	s.pod = p
	return p, nil
}

func (s *service) otherVM(id string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	for other, t := range s.tasks {
		if other != id && t != nil && t.kind == kindVM {
			return other
		}
	}
	return ""
}

// createSandbox makes the pod: its state dir, and the shim enters the
// sandbox's cgroup (a directory or a systemd scope under the pod's), so
// that the shim, and QEMU until it moves into its own cgroup, are counted
// against the pod's limits from their first page.
func (s *service) createSandbox(ctx context.Context, t *task, oci *specs.Spec) error {
	var cg *podcgroup.Path
	if oci.Linux != nil && oci.Linux.CgroupsPath != "" {
		p, err := podcgroup.Parse(oci.Linux.CgroupsPath)
		if err != nil {
			return err
		}
		cg = &p
	}
	p, err := s.podFor(t.id, cg)
	if err != nil {
		return err
	}
	if cg != nil {
		if _, err := podcgroup.Enter(*cg, os.Getpid(), podcgroup.Limits{}); err != nil {
			return err
		}
	}
	ckpt := checkpoint{ID: t.id, Kind: "sandbox", Bundle: t.bundle, PodDir: p.dir}
	if cg != nil {
		ckpt.Cgroup = cg.Raw
	}
	if err := ckpt.save(); err != nil {
		return fmt.Errorf("checkpoint: %v: %w", err, errdefs.ErrInternal)
	}
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
	var pid uint32
	var err error
	if t.kind == kindVM {
		pid, err = t.vm.start(ctx)
	} else {
		pid = t.st.get().Pid
	}
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
	if t.kind == kindSandbox || st.Status == StatusCreated {
		t.onExit(128+sig, time.Now())
		if t.kind == kindVM {
			return t.vm.kill(ctx, uint32(unix.SIGKILL))
		}
		return nil
	}
	return t.vm.kill(ctx, sig)
}

func (t *task) delete(ctx context.Context) (state, error) {
	st, err := t.st.begin("deleting", StatusCreated, StatusStopped)
	if err != nil {
		return st, err
	}
	if t.kind == kindVM {
		err = t.vm.delete(ctx)
	} else {
		err = t.svc.deleteSandbox(t)
	}
	t.st.end(nil)
	if st.Status == StatusCreated {
		st.ExitStatus, st.ExitedAt = 128+uint32(unix.SIGKILL), time.Now()
	}
	return st, err
}

func (s *service) deleteSandbox(t *task) error {
	s.mu.Lock()
	p := s.pod
	s.mu.Unlock()
	if p == nil {
		return nil
	}
	if err := removeCheckpoint(p.dir, t.id); err != nil {
		return err
	}
	if len(remainingTasks(p.dir)) == 0 {
		return p.remove()
	}
	return nil
}

func (t *task) pause(ctx context.Context) error {
	if t.kind != kindVM {
		return fmt.Errorf("pausing the sandbox: %w", errdefs.ErrNotImplemented)
	}
	if _, err := t.st.begin("pausing", StatusRunning); err != nil {
		return err
	}
	err := t.vm.machine.Suspend(ctx)
	t.st.end(func(s state) state {
		if err == nil && s.Status == StatusRunning {
			s.Status = StatusPaused
		}
		return s
	})
	return err
}

func (t *task) resume(ctx context.Context) error {
	if t.kind != kindVM {
		return fmt.Errorf("resuming the sandbox: %w", errdefs.ErrNotImplemented)
	}
	if _, err := t.st.begin("resuming", StatusPaused); err != nil {
		return err
	}
	err := t.vm.machine.Resume(ctx)
	t.st.end(func(s state) state {
		if err == nil && s.Status == StatusPaused {
			s.Status = StatusRunning
		}
		return s
	})
	return err
}

func (t *task) stats(ctx context.Context) (*anypb.Any, error) {
	if t.kind != kindVM || t.vm.cgroup == nil {
		return nil, fmt.Errorf("task %s has no cgroup of its own: %w", t.id, errdefs.ErrNotFound)
	}
	m, err := t.vm.cgroup.Stats()
	if err != nil {
		return nil, err
	}
	return typeurl.MarshalAnyToProto(m)
}
