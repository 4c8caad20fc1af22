package vm

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"
)

// DefaultConsoleLogBytes caps each of the serial log's two files
// (console.log and console.log.1): a guest that floods its console costs
// the node at most twice this on disk.
const DefaultConsoleLogBytes = 4 << 20

// console is the guest's serial port for the life of one QEMU: the runtime
// connects to QEMU's socket before the guest runs, so nothing is lost, and
// copies what the guest writes to a capped, rotated log and to the
// runtime's writer (the container's stdout).
type console struct {
	conn net.Conn
	log  *rotatingLog
	done chan struct{}
	// note is the line the console ends with, once the VM's exit is
	// known ("" for none); closing is set by close (nothing to wait for).
	note    chan string
	closing atomic.Bool

	mu    sync.Mutex // orders the guest's bytes and the runtime's lines
	out   io.Writer  // nil once it failed
	last  byte       // the last byte written: a line of ours starts on a line of its own
	ended bool       // QEMU closed the socket: say writes nothing more
}

// noteWait bounds how long the console, at QEMU's end of the stream,
// waits for the VM's exit to be known for its last line.
const noteWait = 5 * time.Second

// attachConsole connects to socket; out may be nil. With keepLog the log
// goes on after what it holds (a console taken over after a restart);
// otherwise it starts empty.
func attachConsole(socket, logPath string, logBytes int64, out io.Writer, keepLog bool) (*console, error) {
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
		return nil, fmt.Errorf("serial console %s: %v: %w", socket, err, errdefs.ErrUnavailable)
	}
	log, err := openRotatingLog(logPath, logBytes, keepLog)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("serial log: %v: %w", err, errdefs.ErrInternal)
	}
	c := &console{conn: conn, log: log, out: out, last: '\n', done: make(chan struct{}), note: make(chan string, 1)}
	go c.copy()
	return c, nil
}

// copy runs until QEMU closes the socket (it exited) or close. A writer
// that fails (a stdout nobody reads any more) is dropped; the log goes on.
// When QEMU closed the socket the console ends with the VM's exit note
// (end), after the guest's last byte.
func (c *console) copy() {
	defer close(c.done)
	defer c.log.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := c.conn.Read(buf)
		if n > 0 {
			c.mu.Lock()
			c.write(buf[:n])
			c.mu.Unlock()
		}
		if err != nil {
			break
		}
	}
	c.mu.Lock()
	c.ended = true
	c.mu.Unlock()
	if c.closing.Load() {
		return
	}
	var note string
	select {
	case note = <-c.note:
	case <-time.After(noteWait):
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.line(note)
}

// write copies p to the log and the writer; c.mu is held.
func (c *console) write(p []byte) {
	_, _ = c.log.Write(p)
	if c.out != nil {
		if _, err := c.out.Write(p); err != nil {
			c.out = nil
		}
	}
	c.last = p[len(p)-1]
}

// line writes a line of the runtime's, on a line of its own after the
// guest's output; "" writes none. c.mu is held.
func (c *console) line(s string) {
	if s == "" {
		return
	}
	l := s + "\r\n" // the guest's serial line ends
	if c.last != '\n' {
		l = "\r\n" + l
	}
	c.write([]byte(l))
}

// say writes a line of the runtime's (a pause, a resume) into the console
// now, between the guest's writes; nothing once the console ended.
func (c *console) say(s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.ended {
		c.line(s)
	}
}

// end gives the console its last line (the VM's exit), written after
// what the guest wrote; "" writes none.
func (c *console) end(note string) {
	select {
	case c.note <- note:
	default:
	}
}

// close disconnects; the copy ends, with no last line.
func (c *console) close() {
	c.closing.Store(true)
	c.conn.Close()
}

// dialNoFollow connects to the unix socket at path, which must be a socket
// and not a link: path is in the VM's dir, which QEMU owned before the
// dir stayed root's (a VM started by an earlier version still runs so),
// and a QEMU that made it a link to a host socket would have the runtime
// talk to it.
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

// rotatingLog is a file that, at max bytes, becomes path.1 (replacing the
// previous one) and starts over.
type rotatingLog struct {
	mu   sync.Mutex
	path string
	max  int64
	f    *os.File
	size int64
}

// openRotatingLog opens the log at path, empty, or with keep after what
// it holds (counted towards max).
func openRotatingLog(path string, max int64, keep bool) (*rotatingLog, error) {
	if max <= 0 {
		max = DefaultConsoleLogBytes
	}
	l := &rotatingLog{path: path, max: max}
	if err := l.open(keep); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *rotatingLog) open(keep bool) error {
	flags := os.O_WRONLY | os.O_CREATE | os.O_TRUNC | unix.O_NOFOLLOW
	if keep {
		flags = os.O_WRONLY | os.O_CREATE | os.O_APPEND | unix.O_NOFOLLOW
	}
	f, err := os.OpenFile(l.path, flags, 0o600)
	if err != nil {
		return err
	}
	var size int64
	if keep {
		fi, err := f.Stat()
		if err != nil {
			f.Close()
			return err
		}
		size = fi.Size()
	}
	l.f, l.size = f, size
	return nil
}

func (l *rotatingLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return 0, os.ErrClosed
	}
	written := 0
	for len(p) > 0 {
		if l.size >= l.max {
			if err := l.rotate(); err != nil {
				return written, err
			}
		}
		n := min(int64(len(p)), l.max-l.size)
		m, err := l.f.Write(p[:n])
		written += m
		l.size += int64(m)
		if err != nil {
			return written, err
		}
		p = p[n:]
	}
	return written, nil
}

func (l *rotatingLog) rotate() error {
	err := l.f.Close()
	l.f = nil
	if rerr := os.Rename(l.path, l.path+".1"); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
		err = errors.Join(err, rerr)
	}
	if oerr := l.open(false); oerr != nil {
		return errors.Join(err, oerr)
	}
	return err
}

func (l *rotatingLog) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}
