package vm

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"golang.org/x/sys/unix"
)

// ResumeFree is how much room the file system of a VM's dir must have
// again before a VM that QEMU paused on a full disk runs on: a few
// seconds of the guest's writes, so that it does not pause again at once.
const ResumeFree = 32 << 20

// spaceInterval is how often a VM paused on a full disk looks for room.
var spaceInterval = 2 * time.Second

// pausedOnIOError handles QEMU's pause of the VM after a write to its disk
// failed with the stop policy, which is QEMU's default for ENOSPC: the
// node's state dir, which holds the overlay, is full. The guest waits,
// unaware, with its write pending; the console (kubectl logs) says so, and
// once the dir's file system has ResumeFree bytes free again the VM runs
// on and the write completes: nothing is lost. A VM that stops meanwhile
// (a delete) ends the wait. One wait at a time: the pause of a VM already
// waiting changes nothing.
func (m *Machine) pausedOnIOError() {
	m.mu.Lock()
	if m.waitingForSpace || m.stopping {
		m.mu.Unlock()
		return
	}
	m.waitingForSpace = true
	c := m.console
	m.mu.Unlock()
	msg := fmt.Sprintf("vmpod: the VM is paused: a write to its disk found the node's state dir %s out of space (%s); it runs on once %d MiB are free there",
		m.layout.Dir, freeSpace(m.layout.Dir), ResumeFree>>20)
	log.L.WithField("vm", m.name).Warn(msg)
	if c != nil {
		c.say(msg)
	}
	go m.resumeOnSpace(c)
}

// say writes a line of vmpod's into the VM's console, if it has one.
func (m *Machine) say(msg string) {
	m.mu.Lock()
	c := m.console
	m.mu.Unlock()
	if c != nil {
		c.say(msg)
	}
}

// resumeOnSpace waits for room in the VM dir's file system, then resumes
// the VM.
func (m *Machine) resumeOnSpace(c *console) {
	t := time.NewTicker(spaceInterval)
	defer t.Stop()
	for {
		select {
		case <-m.exited:
			m.mu.Lock()
			m.waitingForSpace = false
			m.mu.Unlock()
			return
		case <-t.C:
		}
		if free, _, ok := bytesFree(m.layout.Dir); !ok || free < ResumeFree {
			continue
		}
		// A pause that comes right after the resume starts a wait of
		// its own.
		m.mu.Lock()
		m.waitingForSpace = false
		m.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := m.hv.Resume(ctx, m.name)
		cancel()
		if err == nil {
			msg := fmt.Sprintf("vmpod: the VM runs on: the node's state dir %s has room again (%s)", m.layout.Dir, freeSpace(m.layout.Dir))
			log.L.WithField("vm", m.name).Info(msg)
			if c != nil {
				c.say(msg)
			}
			return
		}
		log.L.WithError(err).WithField("vm", m.name).Warn("resume of a VM paused on a full disk")
		m.mu.Lock()
		if m.waitingForSpace || m.stopping || errors.Is(err, errdefs.ErrNotFound) {
			m.mu.Unlock()
			return // a newer wait runs, or the VM is going
		}
		m.waitingForSpace = true
		m.mu.Unlock()
	}
}

// bytesFree is what the file system of dir has free for an unprivileged
// writer (QEMU), and its size; false if it cannot be read.
func bytesFree(dir string) (free, size uint64, ok bool) {
	var st unix.Statfs_t
	if unix.Statfs(dir, &st) != nil {
		return 0, 0, false
	}
	return st.Bavail * uint64(st.Bsize), st.Blocks * uint64(st.Bsize), true
}

// freeSpace says what bytesFree found, for a message.
func freeSpace(dir string) string {
	free, size, ok := bytesFree(dir)
	if !ok {
		return "its free space unknown"
	}
	return fmt.Sprintf("%d bytes free of %d", free, size)
}
