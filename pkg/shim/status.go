package shim

import (
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/containerd/errdefs"
)

// Status is where a task is in its life.
//
//	         Create            Start             guest powers off, crashes,
//	(none) ─────────▶ Created ───────▶ Running ─ QEMU dies, Kill ──▶ Stopped
//	                     │              │    ▲                          │
//	                     │        Pause │    │ Resume                   │ Delete
//	                     │              ▼    │                          ▼
//	                     │             Paused ─────── Kill ──────▶ Stopped
//	                     └──────────────── Kill / Delete ─────────────▶ (none)
//
// A task being started or deleted is marked busy so a second caller gets
// FailedPrecondition instead of racing the first, and no lock is held
// across a hypervisor call.
type Status int

const (
	StatusUnknown Status = iota
	StatusCreated
	StatusRunning
	StatusPaused
	StatusStopped
)

func (s Status) String() string {
	switch s {
	case StatusUnknown:
		return "unknown"
	case StatusCreated:
		return "created"
	case StatusRunning:
		return "running"
	case StatusPaused:
		return "paused"
	case StatusStopped:
		return "stopped"
	default:
		return "Status(" + strconv.Itoa(int(s)) + ")"
	}
}

// state is a task's status and what containerd asks about it.
type state struct {
	Status     Status
	Pid        uint32
	ExitStatus uint32
	ExitedAt   time.Time
	// Busy names an operation in flight ("starting", "deleting").
	Busy string
}

// stateBox changes a state only through update.
type stateBox struct {
	mu sync.Mutex
	s  state
	// exited is closed when the task reaches Stopped.
	exited chan struct{}
}

func newStateBox() *stateBox {
	return &stateBox{s: state{Status: StatusCreated}, exited: make(chan struct{})}
}

// get returns a copy of the state.
func (b *stateBox) get() state {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.s
}

// update applies fn to the state as one transaction: fn sees the current
// state and returns the next one, or an error that leaves it unchanged.
func (b *stateBox) update(fn func(state) (state, error)) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	next, err := fn(b.s)
	if err != nil {
		return err
	}
	if next.Status == StatusStopped && b.s.Status != StatusStopped {
		close(b.exited)
	}
	b.s = next
	return nil
}

// begin marks an operation in flight if the task is in one of the allowed
// states and no other operation is.
func (b *stateBox) begin(op string, allowed ...Status) (state, error) {
	var was state
	err := b.update(func(s state) (state, error) {
		if s.Busy != "" {
			return s, fmt.Errorf("task is %s: %w", s.Busy, errdefs.ErrFailedPrecondition)
		}
		for _, a := range allowed {
			if s.Status == a {
				was = s
				s.Busy = op
				return s, nil
			}
		}
		return s, fmt.Errorf("cannot %s a %s task: %w", op, s.Status, errdefs.ErrFailedPrecondition)
	})
	return was, err
}

// end clears the operation begun by begin and applies fn.
func (b *stateBox) end(fn func(state) state) {
	_ = b.update(func(s state) (state, error) {
		s.Busy = ""
		if fn != nil {
			s = fn(s)
		}
		return s, nil
	})
}

// stop records an exit once; later exits are ignored (a VM stops once).
func (b *stateBox) stop(status uint32, at time.Time) bool {
	stopped := false
	_ = b.update(func(s state) (state, error) {
		if s.Status == StatusStopped {
			return s, nil
		}
		stopped = true
		s.Status, s.ExitStatus, s.ExitedAt = StatusStopped, status, at
		return s, nil
	})
	return stopped
}
