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
	"github.com/containerd/log"
)

// console joins the guest's serial port, which the node daemon holds, to
// the task's stdio FIFOs: what the guest writes is the container's stdout
// (kubectl logs), what is written to stdin reaches the guest (kubectl
// attach).
type console struct {
	terminal bool

	mu     sync.Mutex
	stdout io.WriteCloser
	stderr io.WriteCloser
	stdin  io.ReadCloser
	cancel context.CancelFunc // ends the copy of the output; nil before follow
	copied chan struct{}      // closed when the copy of the output ended; nil before follow
}

// consoleWriter is where follow's copy writes the guest's output.
type consoleWriter = io.Writer

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

// follow copies the guest's output to stdout, with CRLF turned into LF
// unless the container has a terminal, in the background until copyTo
// returns (the console ended) or the console is closed.
func (c *console) follow(copyTo func(context.Context, consoleWriter) error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stdout == nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel, c.copied = cancel, make(chan struct{})
	var out io.Writer = c.stdout
	var lf *crlfWriter
	if !c.terminal {
		lf = &crlfWriter{w: c.stdout}
		out = lf
	}
	go func(done chan struct{}) {
		defer close(done)
		if err := copyTo(ctx, out); err != nil && ctx.Err() == nil {
			log.L.WithError(err).Warn("copy the VM's console to the task's stdout")
		}
		if lf != nil {
			_ = lf.flush()
		}
	}(c.copied)
}

// feed sends what is written to stdin to the guest, in the background,
// until stdin closes.
func (c *console) feed(input func([]byte) error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stdin == nil {
		return
	}
	go func(stdin io.Reader) {
		buf := make([]byte, 32<<10)
		for {
			n, err := stdin.Read(buf)
			if n > 0 {
				if err := input(buf[:n]); err != nil {
					log.L.WithError(err).Warn("console input lost")
				}
			}
			if err != nil {
				return
			}
		}
	}(c.stdin)
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
// the VM stopped.
func (c *console) drain(timeout time.Duration) {
	c.mu.Lock()
	done := c.copied
	c.mu.Unlock()
	if done == nil {
		return
	}
	select {
	case <-done:
	case <-time.After(timeout):
	}
}

// close ends the copy and the streams; containerd sees EOF on stdout and
// stderr.
func (c *console) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cancel != nil {
		c.cancel()
	}
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
// no trailing carriage return, also when a CR ends one write and its LF
// starts the next: a CR at the end of a write is held until the next
// write (or flush) says what follows it.
type crlfWriter struct {
	w  io.Writer
	cr bool // a CR ended the last write and was not written yet
}

func (c *crlfWriter) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	out := make([]byte, 0, len(p)+1)
	if c.cr && p[0] != '\n' {
		out = append(out, '\r')
	}
	c.cr = p[len(p)-1] == '\r'
	body := p
	if c.cr {
		body = p[:len(p)-1]
	}
	out = append(out, bytes.ReplaceAll(body, []byte("\r\n"), []byte("\n"))...)
	if _, err := c.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// flush writes a CR still held.
func (c *crlfWriter) flush() error {
	if !c.cr {
		return nil
	}
	c.cr = false
	_, err := c.w.Write([]byte{'\r'})
	return err
}
