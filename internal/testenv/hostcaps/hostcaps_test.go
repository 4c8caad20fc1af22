package hostcaps

import (
	"slices"
	"testing"
)

// TestCaptures: the named captures are there, each with its golden Host,
// and only libvirt's test driver has no domain capabilities.
func TestCaptures(t *testing.T) {
	names := Names(t)
	for _, want := range []string{TCG, KVM} {
		if !slices.Contains(names, want) {
			t.Errorf("no capture %s among %v", want, names)
		}
	}
	for _, name := range names {
		if len(Caps(t, name)) == 0 {
			t.Errorf("%s.caps.xml is empty", name)
		}
		if dc := DomCaps(t, name); (dc == nil) != (name == "test-driver") {
			t.Errorf("%s.domcaps.xml: %d bytes", name, len(dc))
		}
		if h := Golden[map[string]any](t, name); h["Arch"] == nil {
			t.Errorf("%s.golden.json has no Arch: %v", name, h)
		}
	}
}
