package cri

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/containerd/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"

	"github.com/vmpod/vmpod/pkg/vm"
)

// streamRuntime is what the streaming server runs each exec, attach and
// port-forward with.
type streamRuntime struct{ s *Server }

// Exec hands out the streaming URL of a command in the guest (kubectl
// exec). The guest agent gives a command pipes, never a terminal, so an
// exec with a TTY is refused, pointing to attach (the serial console), as
// the shim refuses it.
func (s *Server) Exec(ctx context.Context, r *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
	c, err := s.container(r.GetContainerId())
	if err != nil {
		return nil, err
	}
	if r.GetTty() {
		return nil, errorf(errdefs.ErrNotImplemented, "exec with a terminal (kubectl exec -t): the QEMU guest agent runs commands without a TTY; "+
			"use kubectl exec without -t for a command, or kubectl attach -it for the VM's serial console")
	}
	if len(r.GetCmd()) == 0 {
		return nil, errorf(errdefs.ErrInvalidArgument, "exec in %s: no command", c.id)
	}
	if err := c.running(); err != nil {
		return nil, err
	}
	st, err := s.streaming()
	if err != nil {
		return nil, err
	}
	r.ContainerId = c.id
	return st.GetExec(r)
}

// Exec runs the command through the guest agent (execInGuest): stdin, if
// any, is read to its end first (at most vm.MaxExecInput), and the output
// is written once the command exited; a non-zero exit is the stream's
// exit code.
func (rt streamRuntime) Exec(ctx context.Context, id string, cmd []string, in io.Reader, out, errw io.WriteCloser,
	tty bool, _ <-chan remotecommand.TerminalSize) error {
	if tty {
		return errorf(errdefs.ErrNotImplemented, "exec with a terminal: the QEMU guest agent runs commands without a TTY")
	}
	c, err := rt.s.container(id)
	if err != nil {
		return err
	}
	// stdin before the VM is held: a client that keeps it open must not
	// hold up the VM's deletion.
	var stdin []byte
	if in != nil {
		if stdin, err = io.ReadAll(io.LimitReader(in, vm.MaxExecInput+1)); err != nil {
			return fmt.Errorf("exec stdin: %w", err)
		}
		if len(stdin) > vm.MaxExecInput {
			return errorf(errdefs.ErrInvalidArgument, "exec stdin is over %d bytes: the QEMU guest agent takes it in one message", vm.MaxExecInput)
		}
	}
	res, err := rt.s.execIn(ctx, c, vm.ExecRequest{Args: cmd, Stdin: stdin})
	if err != nil {
		return err
	}
	if out != nil {
		if _, err := out.Write(res.Stdout); err != nil {
			return fmt.Errorf("exec stdout: %w", err)
		}
	}
	if errw != nil {
		if _, err := errw.Write(res.Stderr); err != nil {
			return fmt.Errorf("exec stderr: %w", err)
		}
	}
	if res.ExitCode != 0 {
		return utilexec.CodeExitError{Err: fmt.Errorf("command %q in the guest exited with %d", cmd[0], res.ExitCode), Code: res.ExitCode}
	}
	return nil
}

// execIn runs req in c's VM, holding the VM only while it runs.
func (s *Server) execIn(ctx context.Context, c *container, req vm.ExecRequest) (vm.ExecResult, error) {
	v, vmCtx, release, err := c.use()
	if err != nil {
		return vm.ExecResult{}, err
	}
	defer release()
	var started time.Time
	if t := c.get().StartedAt; t != 0 {
		started = time.Unix(0, t)
	}
	waitAgent(ctx, vmCtx, v.PingAgent, started)
	return execInGuest(ctx, vmCtx, v, req)
}

// agentBootGrace is how long after a VM's start an exec waits for the
// guest agent to answer: the guest boots before its agent runs (seconds
// with KVM, tens of seconds under TCG), and an exec soon after the start
// (a startup probe, critest's, a user's) would otherwise find no agent
// and exit 126. agentPollInterval is the pause between pings.
const (
	agentBootGrace    = 2 * time.Minute
	agentPollInterval = 250 * time.Millisecond
)

// waitAgent returns once ping answers, the VM stops (vmCtx), ctx ends,
// or agentBootGrace has passed since started, whichever comes first; the
// exec that follows then reports what it finds. A VM that started
// earlier is not waited for (one ping fewer): its agent is up, or it has
// none.
func waitAgent(ctx, vmCtx context.Context, ping func(context.Context) error, started time.Time) {
	deadline := started.Add(agentBootGrace)
	if started.IsZero() || !time.Now().Before(deadline) {
		return
	}
	for {
		if ping(ctx) == nil {
			return
		}
		wait := min(agentPollInterval, time.Until(deadline))
		if wait <= 0 {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-vmCtx.Done():
			return
		case <-time.After(wait):
		}
	}
}
