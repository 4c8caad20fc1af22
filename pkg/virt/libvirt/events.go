package libvirt

import (
	"sync"

	lv "libvirt.org/go/libvirt"

	"github.com/vmpod/vmpod/pkg/virt"
)

// onLifecycle runs on libvirt's event loop thread, which also serves every
// monitor socket and timer of the process: it must never block.
func (c *Conn) onLifecycle(_ *lv.Connect, d *lv.Domain, ev *lv.DomainEventLifecycle) {
	// d belongs to libvirt for the duration of the callback; not ours to Free.
	name, err := d.GetName()
	if err != nil {
		return
	}
	typ, reason := translateEvent(ev.Event, ev.Detail)
	c.events.push(virt.Event{Domain: name, Type: typ, Reason: reason})
}

// translateEvent maps a libvirt lifecycle event and its detail to ours.
func translateEvent(event lv.DomainEventType, detail int) (virt.EventType, virt.StopReason) {
	switch event {
	case lv.DOMAIN_EVENT_DEFINED:
		return virt.EventDefined, virt.StopNone
	case lv.DOMAIN_EVENT_UNDEFINED:
		return virt.EventUndefined, virt.StopNone
	case lv.DOMAIN_EVENT_STARTED:
		if lv.DomainEventStartedDetailType(detail) == lv.DOMAIN_EVENT_STARTED_WAKEUP {
			// Wake-up from guest suspend-to-RAM: the same QEMU carries on.
			return virt.EventResumed, virt.StopNone
		}
		return virt.EventStarted, virt.StopNone
	case lv.DOMAIN_EVENT_SUSPENDED:
		if lv.DomainEventSuspendedDetailType(detail) == lv.DOMAIN_EVENT_SUSPENDED_IOERROR {
			return virt.EventPausedOnIOError, virt.StopNone
		}
		return virt.EventSuspended, virt.StopNone
	case lv.DOMAIN_EVENT_RESUMED:
		return virt.EventResumed, virt.StopNone
	case lv.DOMAIN_EVENT_STOPPED:
		return virt.EventStopped, stoppedReason(lv.DomainEventStoppedDetailType(detail))
	case lv.DOMAIN_EVENT_SHUTDOWN:
		// QEMU reports who asked: the guest (on its own or answering the
		// ACPI button) or the host, i.e. a signal to QEMU, which is how
		// Destroy starts.
		if lv.DomainEventShutdownDetailType(detail) == lv.DOMAIN_EVENT_SHUTDOWN_HOST {
			return virt.EventShutdown, virt.StopDestroyed
		}
		return virt.EventShutdown, virt.StopGuestShutdown
	case lv.DOMAIN_EVENT_PMSUSPENDED:
		return virt.EventPMSuspended, virt.StopNone
	case lv.DOMAIN_EVENT_CRASHED:
		return virt.EventCrashed, virt.StopCrashed
	default:
		return virt.EventUnknown, virt.StopNone
	}
}

func stoppedReason(d lv.DomainEventStoppedDetailType) virt.StopReason {
	switch d {
	case lv.DOMAIN_EVENT_STOPPED_SHUTDOWN:
		return virt.StopGuestShutdown
	case lv.DOMAIN_EVENT_STOPPED_DESTROYED:
		return virt.StopDestroyed
	case lv.DOMAIN_EVENT_STOPPED_CRASHED:
		return virt.StopCrashed
	case lv.DOMAIN_EVENT_STOPPED_FAILED:
		return virt.StopFailed
	case lv.DOMAIN_EVENT_STOPPED_MIGRATED, lv.DOMAIN_EVENT_STOPPED_SAVED,
		lv.DOMAIN_EVENT_STOPPED_FROM_SNAPSHOT:
		return virt.StopOther
	default:
		return virt.StopUnknown
	}
}

// eventQueue hands events from libvirt's event loop thread to the consumer
// of Events() without ever blocking the loop and without dropping any.
//
// Unbounded rather than a buffered channel that drops when full: a lost
// EventStopped would leave a pod "running" with no VM behind it, while the
// volume is tiny (a handful of events per VM state change), so the queue
// only grows if the consumer stops reading altogether.
type eventQueue struct {
	out chan virt.Event

	mu      sync.Mutex
	pending []virt.Event
	closed  bool

	wake    chan struct{} // has a value when pending may be non-empty
	done    chan struct{} // closed by close()
	stopped chan struct{} // closed when pump has returned
}

func newEventQueue() *eventQueue {
	q := &eventQueue{
		out:     make(chan virt.Event),
		wake:    make(chan struct{}, 1),
		done:    make(chan struct{}),
		stopped: make(chan struct{}),
	}
	go q.pump()
	return q
}

func (q *eventQueue) push(e virt.Event) {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return
	}
	q.pending = append(q.pending, e)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default: // a wake-up is already due; the pump takes the whole batch
	}
}

func (q *eventQueue) pump() {
	defer close(q.stopped)
	defer close(q.out)
	for {
		q.mu.Lock()
		batch := q.pending
		q.pending = nil
		q.mu.Unlock()
		for _, e := range batch {
			select {
			case q.out <- e:
			case <-q.done:
				return
			}
		}
		select {
		case <-q.wake:
		case <-q.done:
			return
		}
	}
}

// close stops delivery and closes the channel; undelivered events are
// dropped, since nobody is obliged to read them after Close.
func (q *eventQueue) close() {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return
	}
	q.closed = true
	q.pending = nil
	q.mu.Unlock()
	close(q.done)
	<-q.stopped
}
