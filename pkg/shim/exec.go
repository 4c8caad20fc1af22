package shim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"syscall"
	"time"

	eventstypes "github.com/containerd/containerd/api/events"
	taskAPI "github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/containerd/v2/pkg/protobuf"
	"github.com/containerd/errdefs"
	"github.com/containerd/fifo"
	"github.com/containerd/log"
	"github.com/containerd/typeurl/v2"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	node "github.com/vmpod/vmpod/api/node/v1"
)

// execProcess is one `kubectl exec` (or exec probe) in the VM's guest: a
// command the QEMU guest agent runs to completion, which the node daemon
// runs (its one exec policy). Its
// stdin, when given, is read to EOF before the command starts; its output
// is written when it exits.
type execProcess struct {
	id   string
	v    *vmTask
	proc specs.Process
	io   taskIO

	mu       sync.Mutex
	started  bool
	pid      uint32
	exit     uint32
	exitedAt time.Time
	cancel   context.CancelFunc
	// killed is the exit status kill gave (128+signal), 0 before.
	killed uint32
	// ran is closed when run has returned.
	ran    chan struct{}
	exited chan struct{}
}

// addExec makes an exec of the VM task t (Exec); it runs at Start.
func (t *task) addExec(r *taskAPI.ExecProcessRequest) (*execProcess, error) {
	v, ok := t.body.(*vmTask)
	if !ok {
		return nil, fmt.Errorf("exec in the sandbox %s: only the VM container runs commands: %w", t.id, errdefs.ErrInvalidArgument)
	}
	if r.Terminal {
		return nil, fmt.Errorf("exec with a terminal (kubectl exec -t): the QEMU guest agent runs commands without a TTY; "+
			"use kubectl exec without -t for a command, or kubectl attach -it for the VM's serial console: %w", errdefs.ErrNotImplemented)
	}
	if st := t.st.get(); st.Status != StatusRunning {
		return nil, fmt.Errorf("exec in %s: the VM is %s, not running: %w", t.id, st.Status, errdefs.ErrFailedPrecondition)
	}
	var proc specs.Process
	if r.Spec != nil {
		if err := typeurl.UnmarshalTo(r.Spec, &proc); err != nil {
			return nil, fmt.Errorf("exec %s: process spec: %v: %w", r.ExecID, err, errdefs.ErrInvalidArgument)
		}
	}
	if len(proc.Args) == 0 {
		return nil, fmt.Errorf("exec %s: no command: %w", r.ExecID, errdefs.ErrInvalidArgument)
	}
	e := &execProcess{id: r.ExecID, v: v, proc: proc, exited: make(chan struct{}), ran: make(chan struct{}),
		io: taskIO{stdin: r.Stdin, stdout: r.Stdout, stderr: r.Stderr}}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.execs == nil {
		t.execs = map[string]*execProcess{}
	}
	if _, dup := t.execs[r.ExecID]; dup {
		return nil, fmt.Errorf("exec %s: %w", r.ExecID, errdefs.ErrAlreadyExists)
	}
	t.execs[r.ExecID] = e
	return e, nil
}

func (t *task) getExec(id string) (*execProcess, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.execs[id]
	if !ok {
		return nil, fmt.Errorf("exec %s in %s: %w", id, t.id, errdefs.ErrNotFound)
	}
	return e, nil
}

// endExecs ends the execs still waiting on their commands (the VM goes).
func (t *task) endExecs() {
	t.mu.Lock()
	execs := make([]*execProcess, 0, len(t.execs))
	for _, e := range t.execs {
		execs = append(execs, e)
	}
	t.mu.Unlock()
	for _, e := range execs {
		e.kill(uint32(syscall.SIGKILL), t.svc.publish, false)
	}
}

func (t *task) removeExec(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.execs, id)
}

// start runs the command; it returns once the command is on its way, with
// the VM's pid (the guest's processes have no pid on the node).
func (e *execProcess) start(ctx context.Context, publish func(any)) (uint32, error) {
	e.mu.Lock()
	if e.started {
		e.mu.Unlock()
		return 0, fmt.Errorf("exec %s: %w: started already", e.id, errdefs.ErrFailedPrecondition)
	}
	e.started = true
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	e.cancel = cancel
	e.pid = e.v.task.st.get().Pid
	e.mu.Unlock()
	go e.run(runCtx, publish)
	return e.pid, nil
}

func (e *execProcess) run(ctx context.Context, publish func(any)) {
	defer close(e.ran)
	status, stdout, stderr := e.execute(ctx)
	if err := e.writeOutput(ctx, stdout, stderr); err != nil {
		log.G(ctx).WithError(err).Warnf("exec %s: output", e.id)
	}
	e.finish(status, publish)
}

// execute gathers stdin and has the node daemon run the command, which
// reports a command the guest cannot run as a shell does (exit status
// 126 or 127, the reason on stderr); a failure to reach it (the daemon
// away, the VM stopped under the command) is exit status 126 too.
func (e *execProcess) execute(ctx context.Context) (uint32, []byte, []byte) {
	var stdin []byte
	if e.io.stdin != "" {
		f, err := fifo.OpenFifo(ctx, e.io.stdin, syscall.O_RDONLY, 0)
		if err != nil {
			return 126, nil, []byte(fmt.Sprintf("vmpod: exec stdin: %v\n", err))
		}
		stdin, err = io.ReadAll(io.LimitReader(f, node.MaxExecStdin+1))
		f.Close()
		if err != nil {
			return 126, nil, []byte(fmt.Sprintf("vmpod: exec stdin: %v\n", err))
		}
		if len(stdin) > node.MaxExecStdin {
			return 126, nil, []byte(fmt.Sprintf("vmpod: exec stdin is over %d bytes: the QEMU guest agent takes it in one message\n", node.MaxExecStdin))
		}
	}
	res, err := e.v.node.Exec(ctx, &node.ExecRequest{Id: e.v.id, ExecId: e.id, Args: e.proc.Args, Env: e.proc.Env, Stdin: stdin})
	switch {
	case err == nil:
		return uint32(res.ExitCode), res.Stdout, res.Stderr
	case ctx.Err() != nil:
		e.mu.Lock()
		defer e.mu.Unlock()
		return e.killed, nil, nil // cancelled only by kill
	default:
		return 126, nil, []byte("vmpod: " + err.Error() + "\n")
	}
}

func (e *execProcess) writeOutput(ctx context.Context, stdout, stderr []byte) error {
	var errs []error
	for _, out := range []struct {
		path string
		data []byte
	}{{e.io.stdout, stdout}, {e.io.stderr, stderr}} {
		if out.path == "" {
			continue
		}
		f, err := fifo.OpenFifo(ctx, out.path, syscall.O_WRONLY, 0)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		_, werr := f.Write(out.data)
		errs = append(errs, werr, f.Close())
	}
	return errors.Join(errs...)
}

// finish records the exit once and tells containerd.
func (e *execProcess) finish(status uint32, publish func(any)) {
	e.mu.Lock()
	select {
	case <-e.exited:
		e.mu.Unlock()
		return
	default:
	}
	e.exit, e.exitedAt = status, time.Now()
	close(e.exited)
	pid, at := e.pid, e.exitedAt
	e.mu.Unlock()
	publish(&eventstypes.TaskExit{ContainerID: e.v.task.id, ID: e.id, Pid: pid, ExitStatus: status, ExitedAt: protobuf.ToTimestamp(at)})
}

// kill ends the exec with 128+sig. The Exec it cancels kills the command
// in the guest and everything it started (SIGKILL whatever sig: the guest
// agent's only way to signal is a kill run beside it). With wait, kill
// returns once that is done (within a few seconds, the daemon's bound), so whoever killed the
// exec finds its command gone: containerd's ExecSync timeout (a probe's
// timeoutSeconds) kills this way. The VM's end (endExecs) does not wait.
func (e *execProcess) kill(sig uint32, publish func(any), wait bool) {
	e.mu.Lock()
	cancel := e.cancel
	if e.killed == 0 {
		e.killed = 128 + sig
	}
	e.mu.Unlock()
	if cancel != nil {
		cancel()
		if wait {
			<-e.ran
		}
	}
	e.finish(128+sig, publish)
}

func (e *execProcess) state(containerID string) *taskAPI.StateResponse {
	e.mu.Lock()
	defer e.mu.Unlock()
	r := &taskAPI.StateResponse{ID: containerID, ExecID: e.id, Pid: e.pid,
		Stdin: e.io.stdin, Stdout: e.io.stdout, Stderr: e.io.stderr}
	select {
	case <-e.exited:
		r.Status, r.ExitStatus, r.ExitedAt = apiStatus(StatusStopped), e.exit, protobuf.ToTimestamp(e.exitedAt)
	default:
		if e.started {
			r.Status = apiStatus(StatusRunning)
		} else {
			r.Status = apiStatus(StatusCreated)
		}
	}
	return r
}

func (e *execProcess) wait(ctx context.Context) (*taskAPI.WaitResponse, error) {
	select {
	case <-e.exited:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return &taskAPI.WaitResponse{ExitStatus: e.exit, ExitedAt: protobuf.ToTimestamp(e.exitedAt)}, nil
}
