package vm

import (
	"fmt"
	"os"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// MaxQEMULogBytes caps each QEMU's stderr log (virt.Info.Log): what
// libvirt writes there at start and stop, and what QEMU writes on its
// stderr, where a compromised QEMU could otherwise write up to the disk
// cap (RLIMIT_FSIZE is per process, not per file). A log past it is cut
// back to its first half, which holds the command line and the start's
// messages, followed by a line saying how much went.
var MaxQEMULogBytes int64 = 1 << 20

// logCapper caps the logs of a Runtime's QEMUs through one inotify
// instance (a per-user resource, 128 by default: not one per VM) and one
// goroutine, started with the first watch.
type logCapper struct {
	mu    sync.Mutex
	ino   *os.File // nil until the first watch
	err   error    // why inotify could not be had
	logs  map[int32]*cappedLog
	paths map[string]int32
}

type cappedLog struct {
	path    string
	max     int64
	dropped int64
}

// watch starts capping the log at path to max bytes, until unwatch.
// QEMU and libvirt hold the log open for appending (TestQEMULogCap checks
// QEMU's descriptor), so their next writes land at the cut, not past a
// hole.
func (c *logCapper) watch(path string, max int64) error {
	if path == "" || max <= 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ino == nil && c.err == nil {
		fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
		if err != nil {
			c.err = fmt.Errorf("inotify: %w", err)
		} else {
			c.ino = os.NewFile(uintptr(fd), "inotify") // read through the runtime's poller
			c.logs, c.paths = map[int32]*cappedLog{}, map[string]int32{}
			go c.run(c.ino)
		}
	}
	if c.err != nil {
		return c.err
	}
	wd, err := unix.InotifyAddWatch(int(c.ino.Fd()), path, unix.IN_MODIFY)
	if err != nil {
		return fmt.Errorf("watch %s: %w", path, err)
	}
	l := &cappedLog{path: path, max: max}
	c.logs[int32(wd)], c.paths[path] = l, int32(wd)
	l.cap() // what was written before the watch
	return nil
}

// unwatch stops capping the log at path.
func (c *logCapper) unwatch(path string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	wd, ok := c.paths[path]
	if !ok {
		return
	}
	delete(c.paths, path)
	delete(c.logs, wd)
	_, _ = unix.InotifyRmWatch(int(c.ino.Fd()), uint32(wd))
}

func (c *logCapper) run(ino *os.File) {
	buf := make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
	for {
		n, err := ino.Read(buf)
		if err != nil {
			return
		}
		c.mu.Lock()
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			if l := c.logs[ev.Wd]; l != nil {
				l.cap()
			}
			off += unix.SizeofInotifyEvent + int(ev.Len)
		}
		c.mu.Unlock()
	}
}

// cap cuts the log back to half its cap, with a line saying what went,
// once it is past the cap.
func (l *cappedLog) cap() {
	var st unix.Stat_t
	if err := unix.Stat(l.path, &st); err != nil || st.Size <= l.max {
		return
	}
	keep := l.max / 2
	if err := os.Truncate(l.path, keep); err != nil {
		return
	}
	l.dropped += st.Size - keep
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "\n[vmpod: QEMU's log passed %d bytes; %d bytes dropped so far]\n", l.max, l.dropped)
}
