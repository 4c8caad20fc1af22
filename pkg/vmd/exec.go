package vmd

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/containerd/errdefs"

	"github.com/vmpod/vmpod/pkg/vm"
)

// Exec runs a command in the running VM's guest through its agent, the
// one policy of every front door:
//
//   - an exec within agentBootGrace of the VM's start first waits for the
//     agent to answer (the guest boots before its agent runs), so a
//     startup probe or a user's exec right after the start runs;
//   - a command the guest cannot run is an exit status with the reason on
//     stderr, as a shell reports it: 127 no such program, 126 no agent or
//     any other failure;
//   - output past vm.MaxExecOutput a stream is cut, and said so on stderr;
//   - what ends the wait is an error: ctx's (DeadlineExceeded for a
//     timeout: the command is killed in the guest), or FailedPrecondition
//     when the VM stopped under the command.
func (s *Service) Exec(ctx context.Context, id string, req vm.ExecRequest) (vm.ExecResult, error) {
	in, err := s.get(id)
	if err != nil {
		return vm.ExecResult{}, err
	}
	v, vmCtx, release, err := in.use()
	if err != nil {
		return vm.ExecResult{}, err
	}
	defer release()
	var started time.Time
	if t := in.Get().StartedAt; t != 0 {
		started = time.Unix(0, t)
	}
	t := time.Now()
	waitAgent(ctx, vmCtx, v.PingAgent, started)
	res, err := execInGuest(ctx, vmCtx, v, req)
	s.metrics.execDone(time.Since(t), res, err)
	return res, err
}

// execInGuest runs req in the guest until it exits, ctx ends, or the VM
// stops (vmCtx), with Exec's exit statuses.
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
// arrives, so the stop is waited for, briefly. A running guest without
// an agent pays that wait on top of the agent ping's.
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

// agentBootGrace is how long after a VM's start an exec waits for the
// guest agent to answer: the guest boots before its agent runs (seconds
// with KVM, tens of seconds under TCG). agentPollInterval is the pause
// between pings.
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
