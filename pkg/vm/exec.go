package vm

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/errdefs"

	"github.com/vmpod/vmpod/pkg/virt"
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

// sessionLeader is the guest program Exec runs every command through:
// setsid(1), from util-linux or busybox, looked up in the command's PATH
// as the command is. Called by a process that leads no process group
// (the agent's child never does), it calls setsid(2) and execs the
// command in place, without a fork: the pid the agent reports, the argv,
// environment, stdin and exit status stay the command's own.
const sessionLeader = "setsid"

// ExecRequest is a command to run in the guest.
type ExecRequest struct {
	// Args is the program and its arguments. The program is looked up in
	// the guest, in the command's PATH: Env's (the C library's default
	// when Env has none), or the agent's when Env is empty.
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
// The command runs as the leader of a session and process group of its
// own (sessionLeader), so that everything it starts can be found again.
// If ctx ends first (a timeout, a kill of the exec), Exec kills the
// command in the guest and everything it started (killGuestCommand),
// waits at most execKillGrace until the command is gone, and returns
// ctx's error, which says whether it is. A guest without setsid in the
// command's PATH runs the command as the agent's plain child, as it would
// without vmpod, and a kill then ends the command and its descendants
// only: what it left to init (a double fork) lives on.
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

	pid, leader, err := m.startCommand(ctx, req)
	if err != nil {
		return ExecResult{}, fmt.Errorf("exec %q in %s: %w", req.Args[0], m.name, err)
	}
	res, err := m.waitExited(ctx, pid)
	switch {
	case err == nil:
		if line, ok := setsidFailed(res, req.Args[0]); leader && ok {
			return ExecResult{}, fmt.Errorf("exec %q in %s: %w: the guest cannot run it: %q",
				req.Args[0], m.name, errdefs.ErrInvalidArgument, line)
		}
		return res, nil
	case ctx.Err() != nil:
		return ExecResult{}, m.abandon(ctx, req, pid, leader)
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
		if err != nil && m.paused(ctx) {
			// The command waits with the guest (a VM paused on a full
			// disk runs on once there is room): so does its status.
			delay = execPollMax
			timer.Reset(delay)
			continue
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

// paused reports whether the VM's vCPUs are stopped while QEMU runs on,
// which libvirt's agent calls refuse as "domain is not running".
func (m *Machine) paused(ctx context.Context) bool {
	info, err := m.hv.Info(ctx, m.name)
	return err == nil && info.State == virt.StatePaused
}

// startCommand starts req in the guest as the leader of a session of its
// own, through sessionLeader, and says whether it could (leader). When the
// agent cannot start setsid (the guest has none in the command's PATH),
// it starts req itself, as the agent's plain child: one more agent round
// trip on such guests, and the command runs as it would without vmpod.
func (m *Machine) startCommand(ctx context.Context, req ExecRequest) (pid int, leader bool, err error) {
	wrapped := req
	wrapped.Args = append([]string{sessionLeader, "--"}, req.Args...)
	pid, err = m.guestExec(ctx, wrapped)
	if err == nil {
		return pid, true, nil
	}
	// The agent refuses a program it cannot start, here setsid; anything
	// else (no agent, a timeout) would fail the plain start too.
	if !errdefs.IsInvalidArgument(err) {
		return 0, false, err
	}
	pid, err = m.guestExec(ctx, req)
	return pid, false, err
}

// setsidFailed recognises setsid's own failure to run the program, which
// Exec reports as it reports a program the agent itself cannot start.
// util-linux's setsid and busybox's exit 127 (no such program) or 126 (not
// executable) with no output but one line on stderr that starts with
// "setsid: " and names the program. The line is the guest's: the caller
// quotes it.
func setsidFailed(res ExecResult, program string) (string, bool) {
	if (res.ExitCode != 126 && res.ExitCode != 127) || len(res.Stdout) > 0 || res.Truncated {
		return "", false
	}
	line, rest, _ := strings.Cut(string(res.Stderr), "\n")
	if rest != "" || len(line) > 4096 || !strings.HasPrefix(line, sessionLeader+": ") || !strings.Contains(line, program) {
		return "", false
	}
	return line, true
}

// abandon is Exec's end when ctx ended first: it kills the command in the
// guest, with what it started, and returns ctx's error, saying whether
// the command is gone.
func (m *Machine) abandon(ctx context.Context, req ExecRequest, pid int, leader bool) error {
	err := fmt.Errorf("exec %q in %s: %w", req.Args[0], m.name, ctx.Err())
	if kerr := m.killGuestCommand(context.WithoutCancel(ctx), pid); kerr != nil {
		return fmt.Errorf("%w; guest pid %d may still run: killing it: %v", err, pid, kerr)
	}
	if !leader {
		return fmt.Errorf("%w; no setsid in the command's PATH in the guest: guest pid %d and its descendants killed", err, pid)
	}
	return fmt.Errorf("%w; guest pid %d, its process group and its session killed", err, pid)
}

// killTreeScript is what killGuestCommand runs in the guest, as
// `/bin/sh -c killTreeScript vmpod-kill PID`: the script is constant and
// PID, its one argument, a number formatted here, so nothing of the
// guest's reaches a shell command line. It needs a POSIX shell's builtins
// (kill, read, set) and /proc, no other program.
//
// It stops, then kills with SIGKILL, the command's process group and
// session (both PID when the command ran through sessionLeader), PID
// itself while it is still the agent's (the script's parent's) child, and
// every descendant of one of those. The group goes first, in one signal:
// the kernel stops a fork under way in it too. Then /proc is walked, each
// process found stopped, until a walk finds none more; stopped processes
// neither fork nor exit, so a descendant stays one (killed first, its
// children would go to init and out of reach). Zombies are left to their
// parents. /proc/PID/stat's second field, the process name, is the
// guest's own and may hold spaces and parentheses: the fields are read
// after its last ") ".
const killTreeScript = `p=$1
kill -STOP -"$p" 2>/dev/null
seen=' ' more=1 walks=0
while [ "$more" = 1 ] && [ "$walks" -lt 64 ]; do
	more=0 walks=$((walks + 1))
	set +f
	for f in /proc/[0-9]*/stat; do
		set -f
		read -r l 2>/dev/null <"$f" || continue
		q=${l%% *}
		case $seen in *" $q "*) continue ;; esac
		set -- ${l##*") "}
		case $1 in Z | X | x) continue ;; esac
		if [ "$3" = "$p" ] || [ "$4" = "$p" ] || { [ "$q" = "$p" ] && [ "$2" = "$PPID" ]; } ||
			case $seen in *" $2 "*) true ;; *) false ;; esac; then
			kill -STOP "$q" 2>/dev/null
			seen="$seen$q "
			more=1
		fi
	done
done
set -f
kill -KILL -"$p" $seen 2>/dev/null
exit 0
`

// killGuestCommand kills a command Exec started, and everything it
// started, with SIGKILL (killTreeScript), and waits, at most
// execKillGrace, until the agent has reaped the command and its output
// pipes are closed: no process that held them is left. qemu-ga has no
// command to signal what it started, so the kill is the guest's own
// shell's, run through guest-exec: it needs /bin/sh, and no other
// program. The pid is the agent's number, formatted here.
func (m *Machine) killGuestCommand(ctx context.Context, pid int) error {
	ctx, cancel := context.WithTimeout(ctx, execKillGrace)
	defer cancel()
	kill, err := m.guestExec(ctx, ExecRequest{Args: []string{"/bin/sh", "-c", killTreeScript, "vmpod-kill", strconv.Itoa(pid)}})
	if err != nil {
		if errdefs.IsInvalidArgument(err) {
			return fmt.Errorf("the guest cannot run /bin/sh, which the kill needs: %w", err)
		}
		return err
	}
	// First the kill, then the command: guest-exec-status says exited
	// once the agent has reaped it and its stdout and stderr are closed,
	// so nothing that held them is left behind.
	for _, p := range []int{kill, pid} {
		res, err := m.waitExited(ctx, p)
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("guest pid %d still runs after %v", p, execKillGrace)
			}
			return err
		}
		if p == kill && res.ExitCode != 0 {
			return fmt.Errorf("the guest's /bin/sh ran the kill to exit status %d: %q", res.ExitCode, firstLine(res.Stderr))
		}
	}
	return nil
}

// firstLine is b's first line, at most 200 bytes of it.
func firstLine(b []byte) string {
	line, _, _ := strings.Cut(string(b[:min(len(b), 200)]), "\n")
	return line
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
	// A child's pid is above 1; anything else would make the kill's
	// -PID mean more than the command's group.
	if *ret.PID < 2 {
		return 0, fmt.Errorf("%w: the guest agent's guest-exec reply has pid %d", errdefs.ErrUnknown, *ret.PID)
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
		Arguments any    `json:"arguments,omitempty"`
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
