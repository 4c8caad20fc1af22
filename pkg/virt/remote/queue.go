package remote

import (
	"sync"

	"github.com/vmpod/vmpod/pkg/virt"
)

// eventQueue hands events to a channel in order, never dropping one and
// never blocking the sender (virt.Hypervisor's Events contract).
type eventQueue struct {
	out    chan virt.Event
	mu     sync.Mutex
	cond   *sync.Cond
	queue  []virt.Event
	closed bool
}

func newEventQueue() *eventQueue {
	q := &eventQueue{out: make(chan virt.Event)}
	q.cond = sync.NewCond(&q.mu)
	go q.run()
	return q
}

func (q *eventQueue) push(ev virt.Event) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return
	}
	q.queue = append(q.queue, ev)
	q.cond.Signal()
}

// close delivers what is queued, then closes out.
func (q *eventQueue) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	q.cond.Signal()
}

func (q *eventQueue) run() {
	defer close(q.out)
	for {
		q.mu.Lock()
		for len(q.queue) == 0 && !q.closed {
			q.cond.Wait()
		}
		if len(q.queue) == 0 {
			q.mu.Unlock()
			return
		}
		ev := q.queue[0]
		q.queue = q.queue[1:]
		q.mu.Unlock()
		q.out <- ev
	}
}
