package host

import "testing"

// FuzzParse checks that Parse never panics, whatever libvirt (or a
// corrupted cache of its output) hands it. Seeds live in
// testdata/fuzz/FuzzParse and come from the captured documents.
func FuzzParse(f *testing.F) {
	f.Fuzz(func(t *testing.T, caps, domCaps []byte) {
		h, err := Parse(caps, domCaps, WithFiles(debianFiles))
		if err != nil {
			return
		}
		// A Host that parsed must be one the rest of vmpod can trust.
		if h.Arch == "" {
			t.Errorf("Parse returned a Host without Arch")
		}
		if h.MaxVCPUs < 0 {
			t.Errorf("MaxVCPUs = %d", h.MaxVCPUs)
		}
	})
}
