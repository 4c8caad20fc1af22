package labeller

import (
	"encoding/json"
	"maps"
	"slices"

	"github.com/vmpod/vmpod/pkg/vmspec"
)

// Change is what the labeller does to a node's labels and annotations.
type Change struct {
	// Set are owned labels to add or change, with their new values.
	Set map[string]string
	// Remove are owned labels the node has and should not, sorted.
	Remove []string
	// SetAnnotations and RemoveAnnotations do the same for the owned
	// annotations (OwnedAnnotations).
	SetAnnotations    map[string]string
	RemoveAnnotations []string
}

// OwnedAnnotations are the Node annotations the labeller writes: exactly
// these keys, since pods and admins use vmpod.io/ annotations too.
var OwnedAnnotations = []string{vmspec.AnnotationNodeKVMReason}

// DiffAnnotations is Diff for the owned annotations: it fills
// c.SetAnnotations and c.RemoveAnnotations.
func (c *Change) DiffAnnotations(current, desired map[string]string) {
	for _, k := range OwnedAnnotations {
		want, wanted := desired[k]
		cur, has := current[k]
		switch {
		case wanted && (!has || cur != want):
			if c.SetAnnotations == nil {
				c.SetAnnotations = map[string]string{}
			}
			c.SetAnnotations[k] = want
		case !wanted && has:
			c.RemoveAnnotations = append(c.RemoveAnnotations, k)
		}
	}
}

// Diff compares a node's labels with the wanted ones over the keys the
// labeller owns; every other label, on either side, is ignored.
func Diff(current, desired map[string]string) Change {
	var c Change
	for k, v := range desired {
		if !Owns(k) {
			continue
		}
		if cur, ok := current[k]; !ok || cur != v {
			if c.Set == nil {
				c.Set = map[string]string{}
			}
			c.Set[k] = v
		}
	}
	for k := range current {
		if _, ok := desired[k]; Owns(k) && !ok {
			c.Remove = append(c.Remove, k)
		}
	}
	slices.Sort(c.Remove)
	return c
}

// Empty reports whether the node's labels are already as wanted.
func (c Change) Empty() bool {
	return len(c.Set) == 0 && len(c.Remove) == 0 && len(c.SetAnnotations) == 0 && len(c.RemoveAnnotations) == 0
}

// MergePatch is the JSON merge patch (RFC 7386, types.MergePatchType)
// that makes the change: {"metadata":{"labels":{"k":"v","stale":null}}}.
// A merge patch names only the keys it changes, so labels other writers
// set, before or while this runs, are never overwritten; null deletes a
// key and is a no-op if someone removed it first.
func (c Change) MergePatch() ([]byte, error) {
	meta := map[string]any{}
	if m := patchMap(c.Set, c.Remove); len(m) > 0 {
		meta["labels"] = m
	}
	if m := patchMap(c.SetAnnotations, c.RemoveAnnotations); len(m) > 0 {
		meta["annotations"] = m
	}
	return json.Marshal(map[string]any{"metadata": meta})
}

func patchMap(set map[string]string, remove []string) map[string]*string {
	m := make(map[string]*string, len(set)+len(remove))
	for _, k := range slices.Sorted(maps.Keys(set)) {
		v := set[k]
		m[k] = &v
	}
	for _, k := range remove {
		m[k] = nil
	}
	return m
}
