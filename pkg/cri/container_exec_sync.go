package cri

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/containerd/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/vmpod/vmpod/pkg/vm"
)

// maxExecSyncOutput caps what ExecSync returns of each of stdout and
// stderr, below what pkg/vm keeps (vm.MaxExecOutput): the kubelet's CRI
// client takes replies of at most 16 MiB, and both streams travel in one.
const maxExecSyncOutput = 4 << 20

// ExecSync runs a command in the guest through its QEMU guest agent
// (vm.Exec) and returns its exit code and output: the kubelet's exec
// probes and `crictl exec -s`. The timeout (0: none) ends the wait with
// DeadlineExceeded, as the kubelet expects of a probe that timed out, and
// kills the command in the guest with everything it started
// (vm.Machine.Exec). A
// command the guest cannot run (no agent, no such program) exits 126 or
// 127 with the reason on stderr, as through the shim.
func (s *Server) ExecSync(ctx context.Context, r *runtimeapi.ExecSyncRequest) (*runtimeapi.ExecSyncResponse, error) {
	c, err := s.container(r.GetContainerId())
	if err != nil {
		return nil, err
	}
	if t := r.GetTimeout(); t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, time.Duration(t)*time.Second,
			fmt.Errorf("exec timeout of %ds exceeded: %w", t, context.DeadlineExceeded))
		defer cancel()
	}
	if len(r.GetCmd()) == 0 {
		return nil, errorf(errdefs.ErrInvalidArgument, "exec in %s: no command", c.id)
	}
	res, err := s.execIn(ctx, c, vm.ExecRequest{Args: r.GetCmd()})
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ExecSyncResponse{
		Stdout: capOutput(res.Stdout), Stderr: capOutput(res.Stderr), ExitCode: int32(res.ExitCode),
	}, nil
}

// execInGuest runs req in the guest until it exits, ctx ends, or the VM
// stops (vmCtx). A command the guest cannot run is an exit status with the
// reason on stderr, as a shell reports it (127: no such program, 126: no
// agent or any other failure), so every front door reports it alike;
// what ends the wait is an error (DeadlineExceeded for a timeout).
func execInGuest(ctx, vmCtx context.Context, v *vm.VM, req vm.ExecRequest) (vm.ExecResult, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(vmCtx, func() {
		cancel(errorf(errdefs.ErrFailedPrecondition, "the VM stopped while the command ran"))
	})
	defer stop()
	res, err := v.Exec(ctx, req)
	switch {
	case err == nil:
		if res.Truncated {
			res.Stderr = append(res.Stderr, fmt.Sprintf("\nvmpod: output cut at %d bytes a stream\n", vm.MaxExecOutput)...)
		}
		return res, nil
	case ctx.Err() != nil:
		return vm.ExecResult{}, fmt.Errorf("%w (%v)", context.Cause(ctx), err)
	case errdefs.IsInvalidArgument(err):
		return vm.ExecResult{ExitCode: 127, Stderr: []byte("vmpod: " + err.Error() + "\n")}, nil
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return vm.ExecResult{}, err
	case stoppedUnder(ctx, v, err):
		if ctx.Err() != nil { // the timeout, the client, or the VM's wait
			return vm.ExecResult{}, fmt.Errorf("%w (%v)", context.Cause(ctx), err)
		}
		return vm.ExecResult{}, errorf(errdefs.ErrFailedPrecondition, "the VM stopped while the command ran (%v)", err)
	default:
		return vm.ExecResult{ExitCode: 126, Stderr: []byte("vmpod: " + err.Error() + "\n")}, nil
	}
}

// vmStopSettle bounds how long an exec that could not reach the guest
// agent waits to learn whether the VM stopped; vmStopArrive how long it
// waits for the stop event when the hypervisor said the domain no longer
// runs, or the agent went away under a running command (a guest shutting
// down stops its agent seconds before it powers off).
const (
	vmStopSettle = 2 * time.Second
	vmStopArrive = 30 * time.Second
)

// stoppedUnder says whether err, an agent call that failed as one fails
// when the domain is gone or not running, came from the VM stopping under
// the command: the agent's channel can go before the VM's stop event
// arrives (and the VM's wait takes the VM back), so the stop is waited
// for, briefly. A running guest without an agent pays that wait on top of
// the agent ping's.
func stoppedUnder(ctx context.Context, v *vm.VM, err error) bool {
	if !errdefs.IsFailedPrecondition(err) && !errdefs.IsNotFound(err) && !errdefs.IsUnavailable(err) {
		return false
	}
	settle := vmStopSettle
	var lost *vm.CommandLostError
	if !errdefs.IsUnavailable(err) || errors.As(err, &lost) {
		// Not running, or gone (vmpod's domains all have an agent
		// channel), or the agent went away under a command it had
		// started (a guest shutting down stops its agent first): the
		// stop event is on its way, or the agent failed and the wait
		// costs a rare exec 30 s before its 126.
		settle = vmStopArrive
	}
	wctx, cancel := context.WithTimeout(ctx, settle)
	defer cancel()
	_, werr := v.Wait(wctx)
	return werr == nil || ctx.Err() != nil
}

// capOutput keeps at most maxExecSyncOutput bytes of b, saying so at its
// end when it cut.
func capOutput(b []byte) []byte {
	if len(b) <= maxExecSyncOutput {
		return b
	}
	note := fmt.Sprintf("\nvmpod: output cut at %d bytes\n", maxExecSyncOutput)
	return append(b[:maxExecSyncOutput-len(note):maxExecSyncOutput-len(note)], note...)
}
