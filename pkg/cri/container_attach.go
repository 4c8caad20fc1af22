package cri

import (
	"context"
	"fmt"
	"io"

	"github.com/containerd/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
)

// Attach hands out the streaming URL of the VM's serial console (kubectl
// attach): what the guest writes from then on, and with stdin, what the
// client types. With a TTY the console is the terminal (the guest's
// getty sets the size; the client's resizes are not passed on: a serial
// line has no window size).
func (s *Server) Attach(ctx context.Context, r *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error) {
	c, err := s.container(r.GetContainerId())
	if err != nil {
		return nil, err
	}
	if err := s.running(c); err != nil {
		return nil, err
	}
	st, err := s.streaming()
	if err != nil {
		return nil, err
	}
	r.ContainerId = c.id
	return st.GetAttach(r)
}

// Attach copies the console to out and in to the console until the
// client goes or the VM's console ends. A slow client never holds up the
// VM's stop.
func (rt streamRuntime) Attach(ctx context.Context, id string, in io.Reader, out, _ io.WriteCloser,
	_ bool, _ <-chan remotecommand.TerminalSize) error {
	c, err := rt.s.container(id)
	if err != nil {
		return err
	}
	release, err := rt.s.sessions.open(sessionAttach, c.sandboxID)
	if err != nil {
		return err
	}
	defer release()
	input, err := rt.s.vms.ConsoleInput(c.id)
	if err != nil {
		return err
	}
	if c.console == nil {
		return errorf(errdefs.ErrFailedPrecondition, "container %s: the VM has no serial console to attach to", c.id)
	}
	a, ok := c.console.attach()
	if !ok {
		return errorf(errdefs.ErrFailedPrecondition, "container %s: the VM has no serial console to attach to", c.id)
	}
	defer c.console.detach(a)
	if in != nil {
		// Ends when the client's stdin does, or at the first write after
		// the console closed. The console itself is never closed here:
		// it is the VM's.
		go io.Copy(input, in) //nolint:errcheck // a lost keystroke is the client's to see
	}
	for {
		select {
		case b, ok := <-a.out:
			if !ok {
				return nil
			}
			if c.console.takeDropped(a) {
				b = append([]byte(fmt.Sprintf("\r\n[vmpod: attach fell behind the console; output was lost here; the container log has all of it]\r\n")), b...)
			}
			if out != nil {
				if _, err := out.Write(b); err != nil {
					return nil // the client went
				}
			}
		case <-ctx.Done():
			return nil
		}
	}
}
