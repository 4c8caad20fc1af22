package libvirt

import (
	"testing"

	lv "libvirt.org/go/libvirt"

	"github.com/vmpod/vmpod/pkg/virt"
)

func TestTranslateEvent(t *testing.T) {
	tests := []struct {
		event      lv.DomainEventType
		detail     int
		wantType   virt.EventType
		wantReason virt.StopReason
	}{
		{lv.DOMAIN_EVENT_DEFINED, int(lv.DOMAIN_EVENT_DEFINED_ADDED), virt.EventDefined, virt.StopNone},
		{lv.DOMAIN_EVENT_UNDEFINED, int(lv.DOMAIN_EVENT_UNDEFINED_REMOVED), virt.EventUndefined, virt.StopNone},
		{lv.DOMAIN_EVENT_STARTED, int(lv.DOMAIN_EVENT_STARTED_BOOTED), virt.EventStarted, virt.StopNone},
		{lv.DOMAIN_EVENT_STARTED, int(lv.DOMAIN_EVENT_STARTED_WAKEUP), virt.EventResumed, virt.StopNone},
		{lv.DOMAIN_EVENT_SUSPENDED, int(lv.DOMAIN_EVENT_SUSPENDED_PAUSED), virt.EventSuspended, virt.StopNone},
		{lv.DOMAIN_EVENT_SUSPENDED, int(lv.DOMAIN_EVENT_SUSPENDED_IOERROR), virt.EventPausedOnIOError, virt.StopNone},
		{lv.DOMAIN_EVENT_RESUMED, int(lv.DOMAIN_EVENT_RESUMED_UNPAUSED), virt.EventResumed, virt.StopNone},
		{lv.DOMAIN_EVENT_STOPPED, int(lv.DOMAIN_EVENT_STOPPED_SHUTDOWN), virt.EventStopped, virt.StopGuestShutdown},
		{lv.DOMAIN_EVENT_STOPPED, int(lv.DOMAIN_EVENT_STOPPED_DESTROYED), virt.EventStopped, virt.StopDestroyed},
		{lv.DOMAIN_EVENT_STOPPED, int(lv.DOMAIN_EVENT_STOPPED_CRASHED), virt.EventStopped, virt.StopCrashed},
		{lv.DOMAIN_EVENT_STOPPED, int(lv.DOMAIN_EVENT_STOPPED_FAILED), virt.EventStopped, virt.StopFailed},
		{lv.DOMAIN_EVENT_STOPPED, int(lv.DOMAIN_EVENT_STOPPED_SAVED), virt.EventStopped, virt.StopOther},
		{lv.DOMAIN_EVENT_STOPPED, 99, virt.EventStopped, virt.StopUnknown},
		{lv.DOMAIN_EVENT_SHUTDOWN, int(lv.DOMAIN_EVENT_SHUTDOWN_GUEST), virt.EventShutdown, virt.StopGuestShutdown},
		{lv.DOMAIN_EVENT_SHUTDOWN, int(lv.DOMAIN_EVENT_SHUTDOWN_FINISHED), virt.EventShutdown, virt.StopGuestShutdown},
		{lv.DOMAIN_EVENT_SHUTDOWN, int(lv.DOMAIN_EVENT_SHUTDOWN_HOST), virt.EventShutdown, virt.StopDestroyed},
		{lv.DOMAIN_EVENT_PMSUSPENDED, int(lv.DOMAIN_EVENT_PMSUSPENDED_MEMORY), virt.EventPMSuspended, virt.StopNone},
		{lv.DOMAIN_EVENT_CRASHED, int(lv.DOMAIN_EVENT_CRASHED_PANICKED), virt.EventCrashed, virt.StopCrashed},
		{lv.DomainEventType(99), 0, virt.EventUnknown, virt.StopNone},
	}
	for _, tt := range tests {
		typ, reason := translateEvent(tt.event, tt.detail)
		if typ != tt.wantType || reason != tt.wantReason {
			t.Errorf("translateEvent(%d, %d) = %v, %v; want %v, %v",
				tt.event, tt.detail, typ, reason, tt.wantType, tt.wantReason)
		}
	}
}

func TestEventQueueNeverBlocksProducer(t *testing.T) {
	q := newEventQueue()
	// Nobody reads: push must still return, as it runs on libvirt's
	// event loop thread.
	for i := 0; i < 10000; i++ {
		q.push(virt.Event{Domain: "d", Type: virt.EventStarted})
	}
	first := <-q.out
	if first.Domain != "d" {
		t.Errorf("first event = %+v", first)
	}
	n := 1
	for n < 10000 {
		<-q.out
		n++
	}
	q.close()
	if _, ok := <-q.out; ok {
		t.Error("channel open after close")
	}
	q.push(virt.Event{Domain: "late"}) // must not panic or block
}
