package cri

import (
	"sync"
)

// attachBuffer is how many chunks of console output an attached client
// may lag behind before it misses output.
const attachBuffer = 256

// consoleOut is where the guest's serial console goes: the container's
// CRI log, and every client attached at the moment (CRI Attach). The
// console's copy never waits for a client: one that falls attachBuffer
// chunks behind misses what does not fit (it is told so once), as the
// log, not the attach, is what keeps everything.
type consoleOut struct {
	log *criLog

	mu       sync.Mutex
	attached map[*attachment]struct{}
	closed   bool
}

func newConsoleOut(log *criLog) *consoleOut {
	return &consoleOut{log: log, attached: map[*attachment]struct{}{}}
}

// attachment is one attached client's share of the console output.
type attachment struct {
	out     chan []byte // closed when the console ends
	dropped bool
}

// Write copies p to the log and to each attached client that keeps up.
func (o *consoleOut) Write(p []byte) (int, error) {
	n, err := o.log.Write(p)
	o.mu.Lock()
	defer o.mu.Unlock()
	for a := range o.attached {
		select {
		case a.out <- append([]byte(nil), p...):
		default:
			a.dropped = true
		}
	}
	return n, err
}

// attach adds a client; its channel closes when the console ends or
// detach. ok is false when the console ended already.
func (o *consoleOut) attach() (a *attachment, ok bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return nil, false
	}
	a = &attachment{out: make(chan []byte, attachBuffer)}
	o.attached[a] = struct{}{}
	return a, true
}

// detach removes a client; it may still read what was queued.
func (o *consoleOut) detach(a *attachment) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.attached[a]; ok {
		delete(o.attached, a)
		close(a.out)
	}
}

// close ends every attachment: the VM's console is over.
func (o *consoleOut) close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.closed = true
	for a := range o.attached {
		delete(o.attached, a)
		close(a.out)
	}
}

// takeDropped says, once, that the client missed output.
func (o *consoleOut) takeDropped(a *attachment) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	d := a.dropped
	a.dropped = false
	return d
}
