package vmplacement

import (
	"hash/maphash"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/vmpod/vmpod/pkg/vmspec"
)

// A capsClass is one set of labeller labels, shared by every node that
// carries exactly those (a cluster's nodes come in a few kinds). PreFilter
// checks a VM against each class once per pod instead of against each
// node's labels (needs.fitsClass), and counts the nodes of the classes
// that can run it to decide whether to name them (prefilter.go).
type capsClass struct {
	// id indexes needs.fit; ids count up from 0.
	id   int
	caps caps
	// nodes is how many nodes are in the class: by the node informer's
	// events when the plugin has members (members.go), else how many the
	// plugin last saw in it, deleted ones included, an estimate that only
	// steers PreFilter's choice.
	nodes atomic.Int64
	// names are the class's nodes by the informer's events; nil without
	// members. Guarded by members.mu.
	names sets.Set[string]
	// published is a copy of names that no one changes, nil when names
	// changed since it was made (members.names).
	published atomic.Pointer[sets.Set[string]]
}

// capsClasses interns capsClasses by their labels. Classes are never
// removed: there is one per distinct set of labeller labels the
// scheduler has seen, a handful in a cluster.
type capsClasses struct {
	mu     sync.Mutex
	byHash map[uint64][]*capsClass // by labelsHash; guarded by mu
	// all is every class, indexed by id; replaced, never changed, when
	// a class is added.
	all atomic.Pointer[[]*capsClass]
}

// classSeed seeds labelsHash; any seed does, one for the process.
var classSeed = maphash.MakeSeed()

// of returns the class of a node with these labels. Finding a known class
// allocates nothing: it runs when the scheduler meets a node or a changed
// Node object, thousands of times when it starts.
func (r *capsClasses) of(labels map[string]string) *capsClass {
	h, n := labelsHash(labels)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.byHash[h] {
		if c.is(labels, n) {
			return c
		}
	}
	var all []*capsClass
	if p := r.all.Load(); p != nil {
		all = *p
	}
	c := &capsClass{id: len(all), caps: capsOf(labellerLabels(labels))}
	if r.byHash == nil {
		r.byHash = map[uint64][]*capsClass{}
	}
	r.byHash[h] = append(r.byHash[h], c)
	grown := append(slices.Clip(all), c)
	r.all.Store(&grown)
	return c
}

// list returns every class so far, indexed by id. The caller must not
// change the slice.
func (r *capsClasses) list() []*capsClass {
	if p := r.all.Load(); p != nil {
		return *p
	}
	return nil
}

// is reports whether the class is that of a node with these labels, n of
// them the labeller's.
func (c *capsClass) is(labels map[string]string, n int) bool {
	if len(c.caps.labels) != n {
		return false
	}
	for k, v := range c.caps.labels {
		if w, ok := labels[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// labelsHash hashes the labeller's labels among labels, the same for
// equal sets in any order, and counts them.
func labelsHash(labels map[string]string) (sum uint64, n int) {
	var h maphash.Hash
	h.SetSeed(classSeed)
	for k, v := range labels {
		if !isLabellerLabel(k) {
			continue
		}
		h.Reset()
		h.WriteString(k)
		h.WriteByte(0)
		h.WriteString(v)
		sum += h.Sum64()
		n++
	}
	return sum, n
}

// labellerLabels are the labels under the prefixes the labeller owns: all
// that capsOf reads.
func labellerLabels(labels map[string]string) map[string]string {
	own := map[string]string{}
	for k, v := range labels {
		if isLabellerLabel(k) {
			own[k] = v
		}
	}
	return own
}

func isLabellerLabel(key string) bool {
	for _, p := range vmspec.LabelPrefixes {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}
