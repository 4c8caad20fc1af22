package vm_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/vmpod/vmpod/pkg/vm"
)

// TestExec runs commands in the test guest through its QEMU guest agent:
// output, exit codes, stdin, environment, a missing program, a context
// that ends first, and the round trip of a command that does nothing.
func TestExec(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	g := startGuestWithAgent(ctx, t)

	binary := []byte("line one\nline two\x00\xff\n")
	tests := []struct {
		name string
		req  vm.ExecRequest
		want vm.ExecResult
	}{
		{"echo", vm.ExecRequest{Args: []string{"echo", "hello"}},
			vm.ExecResult{Stdout: []byte("hello\n")}},
		{"stderr and exit code", vm.ExecRequest{Args: []string{"sh", "-c", "echo err >&2; exit 3"}},
			vm.ExecResult{ExitCode: 3, Stderr: []byte("err\n")}},
		{"stdin", vm.ExecRequest{Args: []string{"cat"}, Stdin: binary},
			vm.ExecResult{Stdout: binary}},
		{"no stdin reads nothing", vm.ExecRequest{Args: []string{"cat"}},
			vm.ExecResult{}},
		{"env", vm.ExecRequest{Args: []string{"sh", "-c", "echo $GREETING"}, Env: []string{"GREETING=hi there"}},
			vm.ExecResult{Stdout: []byte("hi there\n")}},
		{"killed by a signal", vm.ExecRequest{Args: []string{"sh", "-c", "kill -9 $$"}},
			vm.ExecResult{ExitCode: 128 + 9}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := g.m.Exec(ctx, tt.req)
			if err != nil {
				t.Fatal(err)
			}
			if got.ExitCode != tt.want.ExitCode || !bytes.Equal(got.Stdout, tt.want.Stdout) ||
				!bytes.Equal(got.Stderr, tt.want.Stderr) || got.Truncated {
				t.Errorf("Exec(%q) = exit %d, stdout %q, stderr %q, truncated %v; want exit %d, stdout %q, stderr %q",
					tt.req.Args, got.ExitCode, got.Stdout, got.Stderr, got.Truncated, tt.want.ExitCode, tt.want.Stdout, tt.want.Stderr)
			}
		})
	}

	t.Run("missing program", func(t *testing.T) {
		_, err := g.m.Exec(ctx, vm.ExecRequest{Args: []string{"/no/such/program", "x"}})
		if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "/no/such/program") ||
			!strings.Contains(err.Error(), "No such file or directory") {
			t.Errorf("err = %v, want InvalidArgument naming the program and saying it does not exist", err)
		}
	})
	t.Run("no command", func(t *testing.T) {
		if _, err := g.m.Exec(ctx, vm.ExecRequest{}); !errdefs.IsInvalidArgument(err) {
			t.Errorf("err = %v, want InvalidArgument", err)
		}
	})
	t.Run("context ends first: the command is killed", func(t *testing.T) {
		short, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := g.m.Exec(short, vm.ExecRequest{Args: []string{"sleep", "4321"}})
		if !errors.Is(err, context.DeadlineExceeded) || !strings.HasSuffix(err.Error(), "killed") {
			t.Errorf("err = %v, want the deadline and the command killed", err)
		}
		// pgrep leaves itself out; exit 1: no such process.
		res, err := g.m.Exec(ctx, vm.ExecRequest{Args: []string{"pgrep", "-f", "sleep 4321"}})
		if err != nil || res.ExitCode != 1 {
			t.Errorf("pgrep -f 'sleep 4321' after the deadline: exit %d, stdout %q, err %v; want exit 1, no such process", res.ExitCode, res.Stdout, err)
		}
	})

	// The round trip: ping, guest-exec and guest-exec-status until exited.
	var rtts []time.Duration
	for range 10 {
		start := time.Now()
		if res, err := g.m.Exec(ctx, vm.ExecRequest{Args: []string{"true"}}); err != nil || res.ExitCode != 0 {
			t.Fatalf("Exec(true) = %+v, %v", res, err)
		}
		rtts = append(rtts, time.Since(start))
	}
	t.Logf("exec round trip of `true` (TCG): median %v, min %v, max %v",
		median(rtts).Round(time.Microsecond), minDur(rtts).Round(time.Microsecond), maxDur(rtts).Round(time.Microsecond))
}

// TestExecWithoutAgent: in a guest that runs no QEMU guest agent, Exec
// fails at once with FailedPrecondition saying so.
func TestExecWithoutAgent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	g := startGuest(ctx, t, "noagent-pod.yaml", nil)
	g.console.waitFor(ctx, t, "VMPOD-GUEST: qemu-ga disabled")
	g.console.waitFor(ctx, t, "VMPOD-GUEST: ready")

	start := time.Now()
	_, err := g.m.Exec(ctx, vm.ExecRequest{Args: []string{"true"}})
	took := time.Since(start)
	if !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "no QEMU guest agent") {
		t.Errorf("err = %v, want FailedPrecondition saying the guest runs no QEMU guest agent", err)
	}
	if took > 5*time.Second {
		t.Errorf("Exec took %v to fail, want a few seconds at most", took)
	}
	t.Logf("failed after %v: %v", took.Round(time.Millisecond), err)
}

// BenchmarkExec boots the test guest once and runs `true` in it b.N times
// (make bench: 20), reporting the median round trip.
func BenchmarkExec(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	g := startGuestWithAgent(ctx, b)
	var rtts []time.Duration
	for b.Loop() {
		start := time.Now()
		if _, err := g.m.Exec(ctx, vm.ExecRequest{Args: []string{"true"}}); err != nil {
			b.Fatal(err)
		}
		rtts = append(rtts, time.Since(start))
	}
	b.ReportMetric(median(rtts).Seconds()*1e3, "ms-exec-median")
}

// startGuestWithAgent starts the test guest and waits until its agent
// answers.
func startGuestWithAgent(ctx context.Context, t testing.TB) *testGuest {
	t.Helper()
	g := startGuest(ctx, t, "boot-pod.yaml", nil)
	g.console.waitFor(ctx, t, "VMPOD-GUEST: ready")
	// init says how the agent's start went before it says ready.
	if line := g.console.find("VMPOD-GUEST: qemu-ga "); !strings.Contains(line, "qemu-ga ready") {
		t.Fatalf("the guest's agent did not start: %q (a test guest built before it had one? run hack/guest/build.sh)", line)
	}
	return g
}

func minDur(d []time.Duration) time.Duration {
	m := d[0]
	for _, x := range d {
		m = min(m, x)
	}
	return m
}

func maxDur(d []time.Duration) time.Duration {
	m := d[0]
	for _, x := range d {
		m = max(m, x)
	}
	return m
}
