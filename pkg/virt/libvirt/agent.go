package libvirt

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	lv "libvirt.org/go/libvirt"
)

// AgentCommand implements virt.Hypervisor.
func (c *Conn) AgentCommand(ctx context.Context, name, command string, timeout time.Duration) (string, error) {
	d, st, err := c.domainState(ctx, name)
	if err != nil {
		return "", err
	}
	defer d.Free()
	if !st.Active() {
		return "", fmt.Errorf("guest agent of %s: %w: %s", subject(name), errdefs.ErrFailedPrecondition, st)
	}
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	reply, err := d.QemuAgentCommand(command, agentSeconds(timeout), 0)
	if err != nil {
		return "", agentError(err, name)
	}
	return reply, nil
}

// agentSeconds is libvirt's per-command agent timeout for d: whole seconds,
// rounded up, at least one (0 would mean "do not wait" and negative values
// "libvirt's default" or "forever").
func agentSeconds(d time.Duration) lv.DomainQemuAgentCommandTimeout {
	s := (d + time.Second - 1) / time.Second
	return lv.DomainQemuAgentCommandTimeout(max(s, 1))
}

// agentFailed is in the message libvirt 9 (qemu_agent.c) gives an error
// reply of the agent itself, as an internal error: "internal error: unable
// to execute QEMU agent command 'guest-exec': Guest agent command failed,
// error was '<the agent's desc>'".
const agentFailed = "unable to execute QEMU agent command"

// agentError classifies a failed agent command. libvirt's codes for the
// agent are generic (a missing agent is "unresponsive", a refused command
// an internal error), so the messages say what they mean for the guest.
func agentError(err error, name string) error {
	subj := "guest agent of " + subject(name)
	var le lv.Error
	if !errors.As(err, &le) {
		return classify(err, subj)
	}
	switch le.Code {
	case lv.ERR_AGENT_UNRESPONSIVE, lv.ERR_AGENT_UNSYNCED, lv.ERR_OPERATION_TIMEOUT:
		// "QEMU guest agent is not connected" (the guest never opened the
		// port), "Guest agent not available for now" (no reply in time).
		return fmt.Errorf("%s: %w: the guest runs no QEMU guest agent, or it does not answer: %s (libvirt code %d)",
			subj, errdefs.ErrUnavailable, le.Message, int(le.Code))
	case lv.ERR_ARGUMENT_UNSUPPORTED:
		// "QEMU guest agent is not configured": no channel in the XML.
		return fmt.Errorf("%s: %w: the domain has no guest agent channel: %s (libvirt code %d)",
			subj, errdefs.ErrFailedPrecondition, le.Message, int(le.Code))
	case lv.ERR_INTERNAL_ERROR:
		if _, reason, ok := strings.Cut(le.Message, agentFailed); ok {
			return fmt.Errorf("%s: %w: the agent refused the command: %s", subj, errdefs.ErrInvalidArgument, strings.TrimSpace(reason))
		}
	}
	return classify(err, subj)
}
