package labeller

import (
	"encoding/json"
	"maps"
	"slices"
)

// Change is what the labeller does to a node's labels.
type Change struct {
	// Set are owned labels to add or change, with their new values.
	Set map[string]string
	// Remove are owned labels the node has and should not, sorted.
	Remove []string
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
func (c Change) Empty() bool { return len(c.Set) == 0 && len(c.Remove) == 0 }

// MergePatch is the JSON merge patch (RFC 7386, types.MergePatchType)
// that makes the change: {"metadata":{"labels":{"k":"v","stale":null}}}.
// A merge patch names only the keys it changes, so labels other writers
// set, before or while this runs, are never overwritten; null deletes a
// key and is a no-op if someone removed it first.
func (c Change) MergePatch() ([]byte, error) {
	labels := make(map[string]*string, len(c.Set)+len(c.Remove))
	for _, k := range slices.Sorted(maps.Keys(c.Set)) {
		v := c.Set[k]
		labels[k] = &v
	}
	for _, k := range c.Remove {
		labels[k] = nil
	}
	return json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}})
}
