package vmplacement

import (
	"sync"
	"sync/atomic"

	fwk "k8s.io/kube-scheduler/framework"
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

// infoIndex finds a node's entry from the snapshot's NodeInfo itself,
// without reading the node's name: in Filter and Score at 5,000 nodes,
// hashing the name took over half of the lookup by name, nearly all of it
// waiting for the name's bytes to come from memory, once per node and pod.
// The scheduler's snapshot keeps one NodeInfo per node name for as long
// as the node exists (it overwrites its contents when the node or its
// pods change) and builds a new list of them only when nodes come or go,
// so the map is rebuilt, by name, only when PreFilter meets a new list.
// A NodeInfo not in it (a clone the framework made for nominated pods or
// preemption) is looked up by name.
type infoIndex struct {
	cur atomic.Pointer[infoMap]
}

type infoMap struct {
	// first and n identify the list the map was built from: its first
	// element's address and its length.
	first *fwk.NodeInfo
	n     int
	byNI  map[fwk.NodeInfo]*nodeEntry
}

// update rebuilds the map when nodes is not the list it was built from.
func (x *infoIndex) update(nodes []fwk.NodeInfo, entry func(name string) *nodeEntry) {
	if len(nodes) == 0 {
		return
	}
	if c := x.cur.Load(); c != nil && c.first == &nodes[0] && c.n == len(nodes) {
		return
	}
	m := make(map[fwk.NodeInfo]*nodeEntry, len(nodes))
	for _, ni := range nodes {
		if node := ni.Node(); node != nil {
			m[ni] = entry(node.Name)
		}
	}
	x.cur.Store(&infoMap{first: &nodes[0], n: len(nodes), byNI: m})
}

// get returns the NodeInfo's entry, nil when it is not in the map.
func (x *infoIndex) get(ni fwk.NodeInfo) *nodeEntry {
	if c := x.cur.Load(); c != nil {
		return c.byNI[ni]
	}
	return nil
}
