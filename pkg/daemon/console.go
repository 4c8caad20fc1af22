package daemon

import (
	"sync"
)

// consoleBacklog is how much of a VM's console the daemon holds for a
// shim that (re)connects; consoleChunk the most one message carries.
const (
	consoleBacklog = 1 << 20
	consoleChunk   = 64 << 10
)

// console is a VM's console output as the daemon holds it: the last
// consoleBacklog bytes, counted from the VM's first (total), and the
// readers waiting for more. Writes never wait for a reader.
type console struct {
	mu     sync.Mutex
	buf    []byte // the bytes that end at total
	total  uint64
	closed bool
	more   chan struct{} // closed at the next write or close
}

func newConsole() *console { return &console{more: make(chan struct{})} }

// Write keeps p and wakes the readers.
func (c *console) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.buf = append(c.buf, p...)
	if over := len(c.buf) - consoleBacklog; over > 0 {
		c.buf = append(make([]byte, 0, consoleBacklog), c.buf[over:]...)
	}
	c.total += uint64(len(p))
	close(c.more)
	c.more = make(chan struct{})
	return len(p), nil
}

// close ends the console: readers get what is left, then the end.
func (c *console) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.closed = true
		close(c.more)
	}
}

// next is what follows offset: at most consoleChunk bytes and where they
// end, with skipped when bytes after offset are no longer held. With no
// data, done says the console ended, else more is closed when there may
// be some.
func (c *console) next(offset uint64) (data []byte, end uint64, skipped, done bool, more <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	start := c.total - uint64(len(c.buf))
	if offset < start || offset > c.total {
		skipped = offset != start
		offset = start
	}
	held := c.buf[offset-start:]
	if len(held) > consoleChunk {
		held = held[:consoleChunk]
	}
	if len(held) == 0 {
		return nil, offset, skipped, c.closed, c.more
	}
	return append([]byte(nil), held...), offset + uint64(len(held)), skipped, false, c.more
}
