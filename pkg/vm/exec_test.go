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
		{"exit 127 of its own", vm.ExecRequest{Args: []string{"sh", "-c", "echo gone >&2; exit 127"}},
			vm.ExecResult{ExitCode: 127, Stderr: []byte("gone\n")}},
		// The guest's setsid is in /usr/bin: the command runs as the
		// agent's plain child.
		{"no setsid in PATH", vm.ExecRequest{Args: []string{"sh", "-c", "echo $PATH"}, Env: []string{"PATH=/bin"}},
			vm.ExecResult{Stdout: []byte("/bin\n")}},
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

	// A VM paused under a running command (QEMU's pause on a full disk;
	// here a plain one) holds the command: its status waits for the
	// resume instead of failing on libvirt's "domain is not running".
	t.Run("paused under the command", func(t *testing.T) {
		type result struct {
			res vm.ExecResult
			err error
		}
		done := make(chan result, 1)
		go func() {
			res, err := g.m.Exec(ctx, vm.ExecRequest{Args: []string{"sh", "-c", "sleep 1; echo done"}})
			done <- result{res, err}
		}()
		time.Sleep(300 * time.Millisecond)
		if err := shared.conn.Suspend(ctx, g.name); err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-done:
			t.Fatalf("the command ended while its VM was paused: %+v", r)
		case <-time.After(4 * time.Second):
		}
		if err := shared.conn.Resume(ctx, g.name); err != nil {
			t.Fatal(err)
		}
		r := <-done
		if r.err != nil || r.res.ExitCode != 0 || string(r.res.Stdout) != "done\n" {
			t.Errorf("Exec after the resume = %+v, %v; want exit 0, stdout \"done\\n\"", r.res, r.err)
		}
	})
	t.Run("missing program", func(t *testing.T) {
		_, err := g.m.Exec(ctx, vm.ExecRequest{Args: []string{"/no/such/program", "x"}})
		if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "/no/such/program") ||
			!strings.Contains(err.Error(), "No such file or directory") {
			t.Errorf("err = %v, want InvalidArgument naming the program and saying it does not exist", err)
		}
	})
	t.Run("missing program, no setsid in PATH", func(t *testing.T) {
		_, err := g.m.Exec(ctx, vm.ExecRequest{Args: []string{"/no/such/program"}, Env: []string{"PATH=/bin"}})
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

	// A command that starts children and waits for them: when its exec
	// ends first, they go with it (issue 28, item 14).
	tree := vm.ExecRequest{Args: []string{"sh", "-c", "sleep 300 & sleep 301 & wait"}}
	t.Run("context cancelled: the command and its children are killed", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		err := execUntilChildren(ctx, cctx, t, g.m, tree, "^sleep 30[01]", cancel)
		t.Log(err)
		if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "process group") || !strings.HasSuffix(err.Error(), "killed") {
			t.Errorf("err = %v, want the cancel and the command's process group killed", err)
		}
		assertNoProcess(ctx, t, g.m, "sleep 30[01]")
	})
	t.Run("deadline: the command and its children are killed", func(t *testing.T) {
		tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		err := execUntilChildren(ctx, tctx, t, g.m, tree, "^sleep 30[01]", func() {})
		t.Log(err)
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "process group") || !strings.HasSuffix(err.Error(), "killed") {
			t.Errorf("err = %v, want the deadline and the command's process group killed", err)
		}
		assertNoProcess(ctx, t, g.m, "sleep 30[01]")
	})
	t.Run("no setsid in PATH: the command and its children are killed", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		req := vm.ExecRequest{Args: []string{"sh", "-c", "sleep 302 & sleep 303 & wait"}, Env: []string{"PATH=/bin"}}
		err := execUntilChildren(ctx, cctx, t, g.m, req, "^sleep 30[23]", cancel)
		t.Log(err)
		if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "no setsid") || !strings.HasSuffix(err.Error(), "killed") {
			t.Errorf("err = %v, want the cancel and the command's descendants killed", err)
		}
		assertNoProcess(ctx, t, g.m, "sleep 30[23]")
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

// execUntilChildren runs req in execCtx until two guest processes match
// pattern (pgrep -f, asked in ctx: the command's children), then calls
// end and returns what the Exec returns. The Exec must not return before
// the two run.
func execUntilChildren(ctx, execCtx context.Context, t *testing.T, m *vm.Machine, req vm.ExecRequest, pattern string, end func()) error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := m.Exec(execCtx, req)
		done <- err
	}()
	for {
		select {
		case err := <-done:
			t.Fatalf("Exec(%q) returned %v before two processes matched %q", req.Args, err, pattern)
		default:
		}
		res, err := m.Exec(ctx, vm.ExecRequest{Args: []string{"pgrep", "-f", pattern}})
		if err != nil {
			t.Fatalf("pgrep -f %q: %v", pattern, err)
		}
		if len(strings.Fields(string(res.Stdout))) == 2 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	end()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		t.Fatalf("Exec(%q) did not return: %v", req.Args, ctx.Err())
		return nil
	}
}

// assertNoProcess checks that no guest process matches pattern (pgrep
// -f, which leaves itself out; exit 1: no such process).
func assertNoProcess(ctx context.Context, t *testing.T, m *vm.Machine, pattern string) {
	t.Helper()
	res, err := m.Exec(ctx, vm.ExecRequest{Args: []string{"pgrep", "-f", pattern}})
	if err != nil || res.ExitCode != 1 {
		t.Errorf("pgrep -f %q after the exec ended: exit %d, stdout %q, err %v; want exit 1, no such process", pattern, res.ExitCode, res.Stdout, err)
	}
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
