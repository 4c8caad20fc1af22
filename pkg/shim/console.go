package shim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/fifo"
)

// console joins the guest's serial port to the task's stdio FIFOs: what
// the guest writes is the container's stdout (kubectl logs), what is
// written to stdin reaches the guest (kubectl attach). The Machine owns the
// connection to QEMU (and the serial log); the console gives it its output
// writer before the VM starts and feeds it input once it runs.
type console struct {
	terminal bool
	stdout   io.WriteCloser
	stderr   io.WriteCloser
	stdin    io.ReadCloser

	mu   sync.Mutex
	done <-chan struct{} // closed when guest output stops; nil before attach
}

// openConsole opens the FIFOs containerd made; "" paths are skipped.
func openConsole(ctx context.Context, stdin, stdout, stderr string, terminal bool) (_ *console, retErr error) {
	c := &console{terminal: terminal}
	defer func() {
		if retErr != nil {
			c.close()
		}
	}()
	var err error
	if stdout != "" {
		if c.stdout, err = fifo.OpenFifo(ctx, stdout, syscall.O_WRONLY, 0); err != nil {
			return nil, fmt.Errorf("stdout %s: %v: %w", stdout, err, errdefs.ErrInternal)
		}
	}
	if stderr != "" {
		if c.stderr, err = fifo.OpenFifo(ctx, stderr, syscall.O_WRONLY, 0); err != nil {
			return nil, fmt.Errorf("stderr %s: %v: %w", stderr, err, errdefs.ErrInternal)
		}
	}
	if stdin != "" {
		if c.stdin, err = fifo.OpenFifo(ctx, stdin, syscall.O_RDONLY|syscall.O_NONBLOCK, 0); err != nil {
			return nil, fmt.Errorf("stdin %s: %v: %w", stdin, err, errdefs.ErrInternal)
		}
	}
	return c, nil
}

// output is where the guest's console output goes: stdout, with CRLF
// turned into LF unless the container has a terminal; nil without stdout.
func (c *console) output() io.Writer {
	if c.stdout == nil {
		return nil
	}
	if !c.terminal {
		return &crlfWriter{w: c.stdout}
	}
	return c.stdout
}

// attach starts feeding stdin to the guest (in may be nil: no console) and
// remembers when the guest's output ends.
func (c *console) attach(in io.Writer, done <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.done = done
	if c.stdin != nil && in != nil {
		stdin := c.stdin
		go func() { _, _ = io.Copy(in, stdin) }()
	}
}

// closeStdin stops forwarding input (CloseIO).
func (c *console) closeStdin() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stdin != nil {
		c.stdin.Close()
		c.stdin = nil
	}
}

// drain waits, bounded, for the guest's last output to reach stdout after
// QEMU exited.
func (c *console) drain(timeout time.Duration) {
	c.mu.Lock()
	done := c.done
	c.mu.Unlock()
	if done == nil {
		return
	}
	select {
	case <-done:
	case <-time.After(timeout):
	}
}

// close ends the streams; containerd sees EOF on stdout and stderr.
func (c *console) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for _, cl := range []io.Closer{c.stdin, c.stdout, c.stderr} {
		if cl != nil {
			errs = append(errs, cl.Close())
		}
	}
	c.stdin, c.stdout, c.stderr = nil, nil, nil
	_ = errors.Join(errs...)
}

// crlfWriter turns the serial line's CRLF into LF, so CRI log lines carry
// no trailing carriage return.
type crlfWriter struct{ w io.Writer }

func (c *crlfWriter) Write(p []byte) (int, error) {
	if _, err := c.w.Write(bytes.ReplaceAll(p, []byte("\r\n"), []byte("\n"))); err != nil {
		return 0, err
	}
	return len(p), nil
}
