package cri

import (
	"context"
	"fmt"
	"io"

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
	if err := s.running(c); err != nil {
		return nil, err
	}
	st, err := s.streaming()
	if err != nil {
		return nil, err
	}
	r.ContainerId = c.id
	return st.GetExec(r)
}

// Exec runs the command through the guest agent (execIn): stdin, if
// any, is read to its end first (at most vm.MaxExecInput), and the output
// is written once the command exited; a non-zero exit is the stream's
// exit code. It counts as an exec session of the pod while it runs, and
// ctx ends when the client's connection closes (connContext), which
// kills the command in the guest with everything it started.
func (rt streamRuntime) Exec(ctx context.Context, id string, cmd []string, in io.Reader, out, errw io.WriteCloser,
	tty bool, _ <-chan remotecommand.TerminalSize) error {
	if tty {
		return errorf(errdefs.ErrNotImplemented, "exec with a terminal: the QEMU guest agent runs commands without a TTY")
	}
	c, err := rt.s.container(id)
	if err != nil {
		return err
	}
	release, err := rt.s.sessions.open(sessionExec, c.sandboxID)
	if err != nil {
		return err
	}
	defer release()
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

// execIn runs req in c's VM (vmd.Service.Exec: its exit statuses and its
// wait for a booting guest's agent).
func (s *Server) execIn(ctx context.Context, c *container, req vm.ExecRequest) (vm.ExecResult, error) {
	return s.vms.Exec(ctx, c.id, req)
}
