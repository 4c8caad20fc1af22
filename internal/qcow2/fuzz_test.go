package qcow2

import (
	"bytes"
	"testing"
)

// FuzzReadHeader: any bytes a pod author ships as a disk are read without
// a panic, and a header Check accepts names no backing file and no
// external data file, is neither encrypted nor corrupt, and has a size in
// (0, max]. The seeds (testdata/fuzz) are headers qemu-img wrote: plain,
// version 2, with a backing file, an external data file, encryption.
func FuzzReadHeader(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("QFI\xfb"))
	f.Fuzz(func(t *testing.T, b []byte) {
		const max = 4 << 40
		h, err := ReadHeader(bytes.NewReader(b))
		if err != nil {
			return
		}
		if h.Version != 2 && h.Version != 3 {
			t.Fatalf("version %d read without an error", h.Version)
		}
		if h.Check(max) != nil {
			return
		}
		if h.BackingFileOffset != 0 || h.BackingFileSize != 0 || h.IncompatFeatures&(IncompatDataFile|IncompatCorrupt) != 0 ||
			h.IncompatFeatures&^knownIncompatFeatures != 0 || h.CryptMethod != 0 || h.Size == 0 || h.Size > max {
			t.Fatalf("Check accepted %+v", h)
		}
	})
}
