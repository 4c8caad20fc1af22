package vmplacement

import (
	"sync"
	"sync/atomic"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// members keeps each node's capsClass, each class's node names and node
// count, from the node informer's events: a node added, deleted, or
// updated with other labeller labels changes them at once, and PreFilter
// reads them without a pass over the nodes (candidatesByClass). Without
// members (a framework handle with no informer factory), the plugin
// learns the classes from the NodeInfos it is given instead (learn,
// nodeState).
//
// The events and the scheduler's snapshot are not in step: the
// scheduler's cache and this plugin take the same events in their own
// goroutines. While they disagree on the number of nodes, PreFilter
// passes over the nodes itself (ready). A node whose labeller labels just
// changed may be named by its old class for a cycle: Filter still checks
// each named node against the snapshot's Node, so a node is never wrongly
// admitted, and at worst left out of that one cycle.
type members struct {
	classes *capsClasses

	mu     sync.RWMutex
	byName map[string]member // guarded by mu
	count  atomic.Int64      // len(byName)
	// synced reports whether the handler has seen the informer's first
	// list; until then PreFilter passes over the nodes itself.
	synced func() bool
}

// member is a node as the latest event had it.
type member struct {
	node  *v1.Node
	class *capsClass
}

// newMembers follows the factory's node informer. The scheduler starts
// the factory after it builds the plugins.
func newMembers(classes *capsClasses, factory informers.SharedInformerFactory) (*members, error) {
	m := &members{classes: classes, byName: map[string]member{}}
	reg, err := factory.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { m.set(obj) },
		UpdateFunc: func(_, obj any) { m.set(obj) },
		DeleteFunc: m.remove,
	})
	if err != nil {
		return nil, err
	}
	m.synced = reg.HasSynced
	return m, nil
}

// ready reports whether the members cover every node the informer
// listed, and as many nodes as the snapshot has: when a node was added
// or deleted, the scheduler's cache may have had the event first.
func (m *members) ready(snapshotNodes int) bool {
	return m != nil && m.synced() && m.count.Load() == int64(snapshotNodes)
}

// set records a node added or updated.
func (m *members) set(obj any) {
	node, ok := obj.(*v1.Node)
	if !ok {
		return
	}
	c := m.classes.of(node.Labels)
	m.mu.Lock()
	defer m.mu.Unlock()
	old, known := m.byName[node.Name]
	m.byName[node.Name] = member{node: node, class: c}
	m.count.Store(int64(len(m.byName)))
	if known && old.class == c {
		return
	}
	if known {
		old.class.leave(node.Name)
	}
	c.join(node.Name)
}

// remove forgets a deleted node.
func (m *members) remove(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	node, ok := obj.(*v1.Node)
	if !ok {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if old, known := m.byName[node.Name]; known {
		old.class.leave(node.Name)
		delete(m.byName, node.Name)
		m.count.Store(int64(len(m.byName)))
	}
}

// classOf returns the class of this Node object when it is the one the
// latest event brought, so that the labels need not be read again; nil
// otherwise.
func (m *members) classOf(node *v1.Node) *capsClass {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if mb, ok := m.byName[node.Name]; ok && mb.node == node {
		return mb.class
	}
	return nil
}

// names returns the names of the class's nodes: a set shared by every
// caller until the class changes, which no one may change. The framework
// copies a PreFilterResult's set before it merges it with others.
func (m *members) names(c *capsClass) sets.Set[string] {
	if p := c.published.Load(); p != nil {
		return *p
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if p := c.published.Load(); p != nil {
		return *p
	}
	s := c.names.Clone()
	c.published.Store(&s)
	return s
}

// join and leave change the class's nodes; the caller holds members.mu.
func (c *capsClass) join(name string) {
	if c.names == nil {
		c.names = sets.New[string]()
	}
	c.names.Insert(name)
	c.nodes.Store(int64(len(c.names)))
	c.published.Store(nil)
}

func (c *capsClass) leave(name string) {
	c.names.Delete(name)
	c.nodes.Store(int64(len(c.names)))
	c.published.Store(nil)
}
