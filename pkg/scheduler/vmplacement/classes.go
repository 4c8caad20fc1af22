package vmplacement

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"

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
	// nodes is how many nodes the plugin last saw in the class, deleted
	// ones included; an estimate that only steers PreFilter's choice.
	nodes atomic.Int64
}

// capsClasses interns capsClasses by their labels. Classes are never
// removed: there is one per distinct set of labeller labels the
// scheduler has seen, a handful in a cluster.
type capsClasses struct {
	mu    sync.Mutex
	byKey map[string]*capsClass // guarded by mu
	// all is every class, indexed by id; replaced, never changed, when
	// a class is added.
	all atomic.Pointer[[]*capsClass]
}

// of returns the class of a node with these labels.
func (r *capsClasses) of(labels map[string]string) *capsClass {
	own := labellerLabels(labels)
	key := classKey(own)
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.byKey[key]; ok {
		return c
	}
	var all []*capsClass
	if p := r.all.Load(); p != nil {
		all = *p
	}
	c := &capsClass{id: len(all), caps: capsOf(own)}
	if r.byKey == nil {
		r.byKey = map[string]*capsClass{}
	}
	r.byKey[key] = c
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

// labellerLabels are the labels under the prefixes the labeller owns: all
// that capsOf reads.
func labellerLabels(labels map[string]string) map[string]string {
	own := map[string]string{}
	for k, v := range labels {
		for _, p := range vmspec.LabelPrefixes {
			if strings.HasPrefix(k, p) {
				own[k] = v
				break
			}
		}
	}
	return own
}

// classKey is the labels in one string, the same for equal maps.
func classKey(labels map[string]string) string {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(labels[k])
		b.WriteByte('\n')
	}
	return b.String()
}
