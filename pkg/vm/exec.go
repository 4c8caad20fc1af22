package vm

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/containerd/errdefs"
)

const (
	// MaxExecOutput caps what Exec returns of each of stdout and stderr.
	// qemu-ga keeps at most 16 MiB of each itself (QEMU 7.2's
	// GUEST_EXEC_MAX_OUTPUT), but the agent is the guest's: its reply is
	// not trusted to respect that.
	MaxExecOutput = 16 << 20
	// MaxExecInput caps ExecRequest.Stdin: it travels in one agent
	// command, base64-encoded inside JSON.
	MaxExecInput = 1 << 20

	// agentPingTimeout bounds the guest-ping that tells a guest without an
	// agent from one with a slow agent.
	agentPingTimeout = 2 * time.Second
	// agentCommandTimeout bounds each guest-exec and guest-exec-status:
	// both return at once in a healthy agent, however long the command runs.
	agentCommandTimeout = 10 * time.Second
	// The guest-exec-status poll starts fast, for short commands, and
	// backs off to this.
	execPollFirst = 2 * time.Millisecond
	execPollMax   = 200 * time.Millisecond
	// execKillGrace bounds killing a command whose Exec ended first
	// (killGuestCommand).
	execKillGrace = 3 * time.Second
)

// ExecRequest is a command to run in the guest.
type ExecRequest struct {
	// Args is the program and its arguments. The agent looks the program
	// up in its own PATH, in the guest.
	Args []string
	// Env ("NAME=value") is the command's whole environment; empty: the
	// agent's own.
	Env []string
	// Stdin, if not empty, is the command's standard input, closed after
	// it; otherwise the command reads /dev/null. At most MaxExecInput.
	Stdin []byte
}

// ExecResult is how a command in the guest ended.
type ExecResult struct {
	// ExitCode is the command's exit status; 128+N when signal N killed
	// it, as a shell reports it.
	ExitCode int
	// Stdout and Stderr are what the command wrote, each at most
	// MaxExecOutput bytes (and at most what the agent kept).
	Stdout, Stderr []byte
	// Truncated says the agent or Exec cut Stdout or Stderr short.
	Truncated bool
}

// Exec runs a command in the guest through the QEMU guest agent
// (guest-exec) and waits for it to exit, polling guest-exec-status with a
// bounded backoff. The guest must run qemu-ga on the
// org.qemu.guest_agent.0 port that every vmpod domain has; Exec first
// pings it for agentPingTimeout and fails with FailedPrecondition when it
// does not answer, rather than wait.
//
// The agent runs commands to completion: no streaming, no terminal. That
// is enough for `kubectl exec POD -- CMD` and `kubectl exec -i` with a
// bounded stdin (sent in full before the command starts) and output
// returned once it exits. It is not enough for `kubectl exec -it`: the
// agent gives a command pipes, never a TTY, so there is no job control,
// no window size, no line editing, no interactive shell; runtimes refuse
// a terminal exec with a message that points to `kubectl attach -it`
// (the serial console) instead.
//
// If ctx ends first (a timeout, a kill of the exec), Exec kills the
// command in the guest with SIGKILL, waits at most execKillGrace until it
// is gone, and returns ctx's error, which says whether it is gone. Its
// children are not killed: they were the command's to end.
func (m *Machine) Exec(ctx context.Context, req ExecRequest) (ExecResult, error) {
	if len(req.Args) == 0 || req.Args[0] == "" {
		return ExecResult{}, fmt.Errorf("exec in %s: %w: no command", m.name, errdefs.ErrInvalidArgument)
	}
	if len(req.Stdin) > MaxExecInput {
		return ExecResult{}, fmt.Errorf("exec in %s: %w: stdin of %d bytes, past the %d the guest agent takes in one command",
			m.name, errdefs.ErrInvalidArgument, len(req.Stdin), MaxExecInput)
	}
	if _, err := m.hv.AgentCommand(ctx, m.name, `{"execute":"guest-ping"}`, agentPingTimeout); err != nil {
		if errdefs.IsUnavailable(err) {
			return ExecResult{}, fmt.Errorf("exec in %s: %w: the guest runs no QEMU guest agent (qemu-ga on virtio-serial port org.qemu.guest_agent.0), or it did not answer a ping within %v: %v",
				m.name, errdefs.ErrFailedPrecondition, agentPingTimeout, err)
		}
		return ExecResult{}, fmt.Errorf("exec in %s: %w", m.name, err)
	}

	pid, err := m.guestExec(ctx, req)
	if err != nil {
		return ExecResult{}, fmt.Errorf("exec %q in %s: %w", req.Args[0], m.name, err)
	}
	res, err := m.waitExited(ctx, pid)
	switch {
	case err == nil:
		return res, nil
	case ctx.Err() != nil:
		return ExecResult{}, m.abandon(ctx, req, pid)
	default:
		return ExecResult{}, &CommandLostError{PID: pid, Err: fmt.Errorf("exec %q in %s: status of guest pid %d: %w", req.Args[0], m.name, pid, err)}
	}
}

// waitExited polls guest-exec-status for pid, fast at first and backing
// off to execPollMax, until pid has exited (how) or ctx ends (ctx's error).
func (m *Machine) waitExited(ctx context.Context, pid int) (ExecResult, error) {
	delay := execPollFirst
	timer := time.NewTimer(delay)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return ExecResult{}, ctx.Err()
		case <-timer.C:
		}
		res, exited, err := m.guestExecStatus(ctx, pid)
		if err != nil && ctx.Err() != nil {
			return ExecResult{}, ctx.Err()
		}
		if err != nil {
			return ExecResult{}, err
		}
		if exited {
			return res, nil
		}
		delay = min(2*delay, execPollMax)
		timer.Reset(delay)
	}
}

// abandon is Exec's end when ctx ended first: it kills the command in the
// guest and returns ctx's error, saying whether the command is gone.
func (m *Machine) abandon(ctx context.Context, req ExecRequest, pid int) error {
	err := fmt.Errorf("exec %q in %s: %w", req.Args[0], m.name, ctx.Err())
	if kerr := m.killGuestCommand(context.WithoutCancel(ctx), pid); kerr != nil {
		return fmt.Errorf("%w; guest pid %d may still run: killing it: %v", err, pid, kerr)
	}
	return fmt.Errorf("%w; guest pid %d killed", err, pid)
}

// killGuestCommand sends SIGKILL to a command Exec started and waits,
// at most execKillGrace, until the agent has reaped it. qemu-ga has no
// command to signal what it started, so the kill is the guest's own
// shell's builtin, run through guest-exec: it needs no kill binary. The
// pid is the agent's number, formatted here, so nothing of the guest's
// reaches the shell's command line but an integer.
func (m *Machine) killGuestCommand(ctx context.Context, pid int) error {
	ctx, cancel := context.WithTimeout(ctx, execKillGrace)
	defer cancel()
	kill, err := m.guestExec(ctx, ExecRequest{Args: []string{"/bin/sh", "-c", "kill -KILL " + strconv.Itoa(pid)}})
	if err != nil {
		return err
	}
	// First the kill, then the command: guest-exec-status says exited
	// once the agent has reaped it, so no process is left behind.
	for _, p := range []int{kill, pid} {
		if _, err := m.waitExited(ctx, p); err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("guest pid %d still runs after %v", p, execKillGrace)
			}
			return err
		}
	}
	return nil
}

// PingAgent asks the guest agent for a guest-ping, waiting at most
// agentPingTimeout: nil when it answers. A guest that is still booting
// has no agent yet (Unavailable, or FailedPrecondition before the
// channel is up).
func (m *Machine) PingAgent(ctx context.Context) error {
	if _, err := m.hv.AgentCommand(ctx, m.name, `{"execute":"guest-ping"}`, agentPingTimeout); err != nil {
		return fmt.Errorf("guest agent of %s: %w", m.name, err)
	}
	return nil
}

// guestExec starts the command and returns its pid in the guest.
func (m *Machine) guestExec(ctx context.Context, req ExecRequest) (int, error) {
	type args struct {
		Path          string   `json:"path"`
		Arg           []string `json:"arg,omitempty"`
		Env           []string `json:"env,omitempty"`
		InputData     string   `json:"input-data,omitempty"`
		CaptureOutput bool     `json:"capture-output"`
	}
	a := args{Path: req.Args[0], Arg: req.Args[1:], Env: req.Env, CaptureOutput: true}
	if len(req.Stdin) > 0 {
		a.InputData = base64.StdEncoding.EncodeToString(req.Stdin)
	}
	var ret struct {
		PID *int `json:"pid"`
	}
	if err := m.agent(ctx, "guest-exec", a, &ret); err != nil {
		return 0, err
	}
	if ret.PID == nil {
		return 0, fmt.Errorf("%w: the guest agent's guest-exec reply has no pid", errdefs.ErrUnknown)
	}
	return *ret.PID, nil
}

// guestExecStatus asks whether pid exited and, if so, how.
func (m *Machine) guestExecStatus(ctx context.Context, pid int) (ExecResult, bool, error) {
	var st struct {
		Exited       bool   `json:"exited"`
		ExitCode     *int   `json:"exitcode"`
		Signal       *int   `json:"signal"`
		OutData      string `json:"out-data"`
		ErrData      string `json:"err-data"`
		OutTruncated bool   `json:"out-truncated"`
		ErrTruncated bool   `json:"err-truncated"`
	}
	if err := m.agent(ctx, "guest-exec-status", map[string]int{"pid": pid}, &st); err != nil {
		return ExecResult{}, false, err
	}
	if !st.Exited {
		return ExecResult{}, false, nil
	}
	res := ExecResult{Truncated: st.OutTruncated || st.ErrTruncated}
	switch {
	case st.ExitCode != nil:
		res.ExitCode = *st.ExitCode
	case st.Signal != nil:
		res.ExitCode = 128 + *st.Signal
	default:
		return ExecResult{}, false, fmt.Errorf("%w: the guest agent says pid %d exited, without an exit code or signal", errdefs.ErrUnknown, pid)
	}
	var cut bool
	var err error
	if res.Stdout, cut, err = decodeOutput(st.OutData); err != nil {
		return ExecResult{}, false, fmt.Errorf("stdout: %w", err)
	}
	res.Truncated = res.Truncated || cut
	if res.Stderr, cut, err = decodeOutput(st.ErrData); err != nil {
		return ExecResult{}, false, fmt.Errorf("stderr: %w", err)
	}
	res.Truncated = res.Truncated || cut
	return res, true, nil
}

// decodeOutput decodes the agent's base64 output, at most MaxExecOutput
// bytes of it: only a prefix is decoded, so a lying agent costs no more.
func decodeOutput(s string) ([]byte, bool, error) {
	cut := false
	// EncodedLen is a multiple of 4, so the prefix is whole base64 groups.
	if n := base64.StdEncoding.EncodedLen(MaxExecOutput); len(s) > n {
		s, cut = s[:n], true
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, false, fmt.Errorf("%w: the guest agent sent bad base64: %v", errdefs.ErrUnknown, err)
	}
	if len(b) > MaxExecOutput {
		b, cut = b[:MaxExecOutput], true
	}
	return b, cut, nil
}

// agent sends one command with arguments and decodes its "return" into
// ret. The reply is the guest's: it is parsed, never trusted further.
func (m *Machine) agent(ctx context.Context, command string, args, ret any) error {
	cmd, err := json.Marshal(struct {
		Execute   string `json:"execute"`
		Arguments any    `json:"arguments"`
	}{command, args})
	if err != nil {
		return fmt.Errorf("%s: %v: %w", command, err, errdefs.ErrInternal)
	}
	reply, err := m.hv.AgentCommand(ctx, m.name, string(cmd), agentCommandTimeout)
	if err != nil {
		return err
	}
	var r struct {
		Return json.RawMessage `json:"return"`
	}
	if err := json.Unmarshal([]byte(reply), &r); err != nil {
		return fmt.Errorf("%w: the guest agent's %s reply: %v", errdefs.ErrUnknown, command, err)
	}
	if len(r.Return) == 0 {
		return fmt.Errorf("%w: the guest agent's %s reply has no \"return\"", errdefs.ErrUnknown, command)
	}
	if err := json.Unmarshal(r.Return, ret); err != nil {
		return fmt.Errorf("%w: the guest agent's %s reply: %v", errdefs.ErrUnknown, command, err)
	}
	return nil
}

// CommandLostError is an Exec whose command the guest started but whose
// end the guest agent did not report: the agent went away, most often
// because the guest is shutting down. Err keeps the cause's class.
type CommandLostError struct {
	PID int // in the guest
	Err error
}

func (e *CommandLostError) Error() string { return e.Err.Error() }
func (e *CommandLostError) Unwrap() error { return e.Err }
