package vmd

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/vmpod/vmpod/pkg/vm"
)

// TestWaitAgent: an exec soon after the VM's start waits for the guest
// agent to answer (the guest is still booting); one long after it, or
// into a VM that stopped, does not wait.
func TestWaitAgent(t *testing.T) {
	ctx := context.Background()
	notUp := errors.New("no agent yet")
	pingAfter := func(n int) (func(context.Context) error, *int) {
		calls := 0
		return func(context.Context) error {
			calls++
			if calls <= n {
				return notUp
			}
			return nil
		}, &calls
	}

	ping, calls := pingAfter(3)
	start := time.Now()
	waitAgent(ctx, ctx, ping, time.Now())
	if *calls != 4 {
		t.Errorf("just started, agent up at the 4th ping: %d pings, want 4", *calls)
	}
	if d := time.Since(start); d < 3*agentPollInterval {
		t.Errorf("just started: returned after %v, before the agent answered", d)
	}

	ping, calls = pingAfter(1000)
	waitAgent(ctx, ctx, ping, time.Now().Add(-agentBootGrace-time.Second))
	if *calls != 0 {
		t.Errorf("started long ago: %d pings, want none", *calls)
	}

	ping, calls = pingAfter(1000)
	waitAgent(ctx, ctx, ping, time.Time{})
	if *calls != 0 {
		t.Errorf("no start time: %d pings, want none", *calls)
	}

	stopped, stop := context.WithCancel(ctx)
	stop()
	ping, calls = pingAfter(1000)
	waitAgent(ctx, stopped, ping, time.Now())
	if *calls != 1 {
		t.Errorf("VM stopped: %d pings, want 1", *calls)
	}

	// The grace ends the wait even if the agent never answers.
	ping, _ = pingAfter(1000)
	start = time.Now()
	waitAgent(ctx, ctx, ping, time.Now().Add(-agentBootGrace+500*time.Millisecond))
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("grace ending in 0.5 s: waited %v", d)
	}
}

func vmExec(args ...string) vm.ExecRequest { return vm.ExecRequest{Args: args} }
