package shim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/fifo"
	"golang.org/x/sys/unix"
)

// console joins the guest's serial port (QEMU's unix socket) to the task's
// stdio FIFOs: what the guest writes is the container's stdout (kubectl
// logs), what is written to stdin reaches the guest (kubectl attach).
type console struct {
	terminal bool
	stdout   io.WriteCloser
	stderr   io.WriteCloser
	stdin    io.ReadCloser

	mu     sync.Mutex
	conn   net.Conn
	copied chan struct{} // closed when guest output stops
}

// openConsole opens the FIFOs containerd made; "" paths are skipped.
func openConsole(ctx context.Context, stdin, stdout, stderr string, terminal bool) (_ *console, retErr error) {
	c := &console{terminal: terminal, copied: make(chan struct{})}
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

// attach connects to QEMU's serial socket and starts copying. It runs while
// the guest is paused, so the guest's first byte is not lost.
func (c *console) attach(socket string) error {
	var conn net.Conn
	var err error
	// QEMU listens before libvirt reports the domain started; a short
	// bounded retry covers a slow filesystem.
	for i := 0; i < 50; i++ {
		if conn, err = dialNoFollow(socket); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("serial console %s: %v: %w", socket, err, errdefs.ErrUnavailable)
	}
	c.mu.Lock()
	c.conn = conn
	c.mu.Unlock()
	go func() {
		defer close(c.copied)
		if c.stdout == nil {
			_, _ = io.Copy(io.Discard, conn)
			return
		}
		var w io.Writer = c.stdout
		if !c.terminal {
			w = &crlfWriter{w: c.stdout}
		}
		_, _ = io.Copy(w, conn)
	}()
	if c.stdin != nil {
		go func() { _, _ = io.Copy(conn, c.stdin) }()
	}
	return nil
}

// dialNoFollow connects to the unix socket at path, which must be a socket
// and not a link: path is in the VM's dir, which QEMU owns, and a QEMU
// that made it a link to a host socket would have the shim talk to it.
func dialNoFollow(path string) (net.Conn, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return nil, fmt.Errorf("%s is not a socket", path)
	}
	// connect(2) through the descriptor's magic link reaches the very
	// socket checked above.
	return net.Dial("unix", fmt.Sprintf("/proc/self/fd/%d", fd))
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
// QEMU exited (its socket then reports EOF).
func (c *console) drain(timeout time.Duration) {
	c.mu.Lock()
	attached := c.conn != nil
	c.mu.Unlock()
	if !attached {
		return
	}
	select {
	case <-c.copied:
	case <-time.After(timeout):
	}
}

// close ends the streams; containerd sees EOF on stdout and stderr.
func (c *console) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for _, cl := range []io.Closer{c.conn, c.stdin, c.stdout, c.stderr} {
		if cl != nil {
			errs = append(errs, cl.Close())
		}
	}
	c.conn, c.stdin, c.stdout, c.stderr = nil, nil, nil, nil
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
