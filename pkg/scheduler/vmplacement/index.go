package vmplacement

import (
	"sync"
	"sync/atomic"
)

// nodeIndex finds the cache entry of a node by name for Filter and Score,
// which look one up for every node in every scheduling cycle, from many
// goroutines. Reads take no lock: the index is a plain map behind an
// atomic pointer, never changed once published. A node not yet in it goes
// into dirty, under mu, and PreFilter publishes a new map holding both
// once per cycle when there are any (publish): a copy per cycle that met
// new nodes, not per node. (sync.Map, used before, spent about as long as
// the rest of Filter in its trie for 1,000 names.)
//
// A deleted node's entry stays: one small entry per node name the
// scheduler has seen.
type nodeIndex struct {
	read atomic.Pointer[map[string]*nodeEntry]

	mu     sync.Mutex
	dirty  map[string]*nodeEntry // guarded by mu
	ndirty atomic.Int64          // len(dirty)
}

// nodeEntry holds a node's latest nodeState.
type nodeEntry struct {
	state atomic.Pointer[nodeState]
}

// entry returns the node's entry, making one if there is none.
func (x *nodeIndex) entry(name string) *nodeEntry {
	if e := x.published(name); e != nil {
		return e
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if e := x.published(name); e != nil {
		return e
	}
	e, ok := x.dirty[name]
	if !ok {
		if x.dirty == nil {
			x.dirty = map[string]*nodeEntry{}
		}
		e = &nodeEntry{}
		x.dirty[name] = e
		x.ndirty.Add(1)
	}
	return e
}

// size is how many entries there are, deleted nodes' included.
func (x *nodeIndex) size() int {
	n := int(x.ndirty.Load())
	if m := x.read.Load(); m != nil {
		n += len(*m)
	}
	return n
}

func (x *nodeIndex) published(name string) *nodeEntry {
	if m := x.read.Load(); m != nil {
		return (*m)[name]
	}
	return nil
}

// publish moves the dirty entries into the lock-free map.
func (x *nodeIndex) publish() {
	if x.ndirty.Load() == 0 {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	var old map[string]*nodeEntry
	if p := x.read.Load(); p != nil {
		old = *p
	}
	m := make(map[string]*nodeEntry, len(old)+len(x.dirty))
	for k, e := range old {
		m[k] = e
	}
	for k, e := range x.dirty {
		m[k] = e
	}
	x.read.Store(&m)
	x.dirty = nil
	x.ndirty.Store(0)
}
