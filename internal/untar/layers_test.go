package untar

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/vmpod/vmpod/internal/testenv/hostiletar"
)

// layersOf are tar streams as Layers, lowest first, named layer0, layer1...
func layersOf(tars ...[]byte) []Layer {
	var ls []Layer
	for i, b := range tars {
		ls = append(ls, Layer{Name: fmt.Sprintf("layer%d", i), Open: func() (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(b)), nil
		}})
	}
	return ls
}

// TestExtractLayersLimits: a layer whose entries would take the image past
// a bound is refused before the entry is written, with an error naming
// the layer, the entry and the bound; sparse entries count at their
// expanded size, and what an upper layer hides does not count.
func TestExtractLayersLimits(t *testing.T) {
	const cap = 1 << 20
	lim := Limits{Bytes: cap, Entries: 100, Depth: 16}
	file := func(name string, size int) hostiletar.Entry {
		return hostiletar.Entry{Name: name, Type: tar.TypeReg, Body: make([]byte, size)}
	}
	for _, tc := range []struct {
		name   string
		layers [][]byte
		lim    Limits // zero: lim above
		limit  Limit  // "": no error
		entry  string // the entry the error names
		layer  string
		absent string // a path the refused entry would have made
	}{
		{name: "a run of zeros", layers: [][]byte{hostiletar.Zeros("disk/zero.raw", 64<<20)},
			limit: LimitBytes, entry: "disk/zero.raw", layer: "layer0", absent: "disk/zero.raw"},
		{name: "PAX sparse", layers: [][]byte{hostiletar.PAXSparse("disk/sparse.raw", 1<<40)},
			limit: LimitBytes, entry: "disk/sparse.raw", layer: "layer0", absent: "disk/sparse.raw"},
		{name: "GNU sparse", layers: [][]byte{hostiletar.GNUSparse("disk/sparse.raw", 1<<40)},
			limit: LimitBytes, entry: "disk/sparse.raw", layer: "layer0", absent: "disk/sparse.raw"},
		{name: "files that add up", layers: [][]byte{
			hostiletar.Of(file("disk/a.raw", 600<<10)), hostiletar.Of(file("disk/b.raw", 600<<10))},
			limit: LimitBytes, entry: "disk/a.raw", layer: "layer0", absent: "disk/a.raw"},
		{name: "many files", layers: [][]byte{hostiletar.ManyFiles(200)},
			limit: LimitEntries, entry: "many/99", layer: "layer0", absent: "many/99"},
		{name: "many files in a lower layer", layers: [][]byte{hostiletar.ManyFiles(99), hostiletar.ManyFiles(10)},
			limit: LimitEntries, entry: "many/88", layer: "layer0"},
		{name: "dirs a path implies", layers: [][]byte{hostiletar.Of(hostiletar.Entry{
			Name: strings.Repeat("d/", 15) + "f", Type: tar.TypeReg})}, lim: Limits{Entries: 10},
			limit: LimitEntries, entry: strings.Repeat("d/", 15) + "f", layer: "layer0", absent: "d"},
		{name: "too deep", layers: [][]byte{hostiletar.Deep(17)},
			limit: LimitDepth, entry: strings.Repeat("d/", 16) + "f", layer: "layer0", absent: "d"},
		{name: "deep enough", layers: [][]byte{hostiletar.Deep(16)}},
		{name: "too long a name", layers: [][]byte{hostiletar.Of(hostiletar.Entry{
			Name: strings.Repeat("n", MaxPathLen+1), Type: tar.TypeReg})},
			limit: LimitPathLen, layer: "layer0"},
		{name: "a disk image within the cap", layers: [][]byte{hostiletar.Of(
			hostiletar.Entry{Name: "disk/", Type: tar.TypeDir}, file("disk/guest.qcow2", cap))}},
		{name: "sparse within the cap", layers: [][]byte{
			hostiletar.PAXSparse("disk/pax.raw", 300<<10), hostiletar.GNUSparse("disk/gnu.raw", 300<<10)}},
		{name: "what an upper layer hides", layers: [][]byte{
			hostiletar.Of(file("disk/old.raw", 900<<10), file("disk/new.raw", 900<<10), file("tmp/junk", 900<<10)),
			hostiletar.Of(hostiletar.Entry{Name: "disk/.wh.old.raw", Type: tar.TypeReg},
				hostiletar.Entry{Name: "tmp/.wh..wh..opq", Type: tar.TypeReg},
				file("disk/new.raw", 10))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := lim
			if tc.lim != (Limits{}) {
				l = tc.lim
			}
			dst := filepath.Join(t.TempDir(), "rootfs")
			err := ExtractLayers(dst, layersOf(tc.layers...), l)
			if tc.limit == "" {
				if err != nil {
					t.Fatalf("ExtractLayers: %v, want no error", err)
				}
				return
			}
			var le *LimitError
			if !errors.As(err, &le) || le.Limit != tc.limit {
				t.Fatalf("ExtractLayers: %v, want a LimitError on %s", err, tc.limit)
			}
			if tc.entry != "" && le.Entry != tc.entry {
				t.Errorf("the error names entry %q, want %q", le.Entry, tc.entry)
			}
			if !strings.HasPrefix(err.Error(), "layer "+tc.layer+": ") || !strings.Contains(err.Error(), fmt.Sprint(le.Max)) {
				t.Errorf("error %q: want it to name layer %s and the cap %d", err, tc.layer, le.Max)
			}
			if tc.absent != "" {
				if _, err := os.Lstat(filepath.Join(dst, tc.absent)); !os.IsNotExist(err) {
					t.Errorf("%s was written: %v", tc.absent, err)
				}
			}
			t.Log(err)
		})
	}
}

// TestExtractLayersSparse: a sparse entry within the bounds is a regular
// file of its real size, holes as zeros.
func TestExtractLayersSparse(t *testing.T) {
	dst := filepath.Join(t.TempDir(), "rootfs")
	const size = 300 << 10
	err := ExtractLayers(dst, layersOf(hostiletar.PAXSparse("disk/pax.raw", size), hostiletar.GNUSparse("disk/gnu.raw", size)), Limits{Bytes: 2 * size})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"disk/pax.raw", "disk/gnu.raw"} {
		b, err := os.ReadFile(filepath.Join(dst, f))
		if err != nil || len(b) != size || slices.IndexFunc(b, func(c byte) bool { return c != 0 }) >= 0 {
			t.Errorf("%s: %d bytes, %v; want %d zeros", f, len(b), err, size)
		}
	}
}

// TestExtractLayersWhiteouts: the layers flatten as the OCI image spec
// says: a whiteout removes a lower entry, an opaque dir hides the lower
// layers' entries in it, an upper file replaces a lower dir.
func TestExtractLayersWhiteouts(t *testing.T) {
	file := func(name, body string) hostiletar.Entry {
		return hostiletar.Entry{Name: name, Type: tar.TypeReg, Body: []byte(body)}
	}
	dir := func(name string) hostiletar.Entry { return hostiletar.Entry{Name: name, Type: tar.TypeDir} }
	dst := filepath.Join(t.TempDir(), "rootfs")
	err := ExtractLayers(dst, layersOf(
		hostiletar.Of(dir("a/"), file("a/x", "lower"), file("a/y", "lower"), dir("b/"), file("b/z", "lower"),
			dir("c/"), file("c/w", "lower"), file("d", "lower")),
		hostiletar.Of(file("a/.wh.x", ""), file("b/.wh..wh..opq", ""), file("b/new", "upper"), file("c", "upper"),
			file("d", "upper")),
	), Limits{Bytes: 1 << 20, Entries: 100, Depth: 8})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	filepath.WalkDir(dst, func(p string, d os.DirEntry, err error) error {
		if err != nil || p == dst {
			return err
		}
		rel, _ := filepath.Rel(dst, p)
		if d.IsDir() {
			got[rel] = "dir"
		} else {
			b, _ := os.ReadFile(p)
			got[rel] = string(b)
		}
		return nil
	})
	want := map[string]string{"a": "dir", "a/y": "lower", "b": "dir", "b/new": "upper", "c": "upper", "d": "upper"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("flattened tree (-want +got):\n%s", diff)
	}
}
