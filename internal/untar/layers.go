package untar

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
)

// Limits bound what ExtractLayers writes for one image; a zero field is
// no bound. An image's content is the pod author's, and without them a
// few KiB of it (a tar header claiming a sparse file's size, a gzip of a
// run of zeros, a stream of tiny entries) can take the node's whole disk
// or every inode of it.
type Limits struct {
	// Bytes is the most the contents of all regular files may add up to,
	// each at its expanded size (a sparse entry's real size: its holes
	// are written as zeros).
	Bytes uint64
	// Entries is the most tar entries all layers may hold, every entry
	// read counting (shadowed ones and whiteouts too), plus the dirs that
	// entries' paths make without an entry of their own.
	Entries uint64
	// Depth is the most components a path may have ("a/b/c" has 3).
	Depth int
}

// MaxPathLen is the longest name an entry may have, whatever the Limits:
// the kernel's PATH_MAX. It bounds the memory a stream of names takes.
const MaxPathLen = 4096

// Limit names one of the bounds a LimitError is about.
type Limit string

// The bounds.
const (
	LimitBytes   Limit = "bytes"
	LimitEntries Limit = "entries"
	LimitDepth   Limit = "depth"
	LimitPathLen Limit = "path length"
)

// LimitError is an extraction stopped because an entry would take it
// past a bound. Nothing of the entry was written.
type LimitError struct {
	Entry string // the entry's name, as the tar has it
	Limit Limit
	Max   uint64 // the bound
	Got   uint64 // what the extraction would come to with the entry
	Size  uint64 // LimitBytes: the entry's own (expanded) size
}

func (e *LimitError) Error() string {
	switch e.Limit {
	case LimitBytes:
		return fmt.Sprintf("entry %q is %d bytes (expanded), which would bring the image's files to %d bytes, past the cap of %d bytes", e.Entry, e.Size, e.Got, e.Max)
	case LimitEntries:
		return fmt.Sprintf("entry %q is past the cap of %d entries (files, dirs, links and whiteouts of all layers, and the dirs their paths imply)", e.Entry, e.Max)
	case LimitDepth:
		return fmt.Sprintf("entry %q is %d components deep, past the cap of %d", e.Entry, e.Got, e.Max)
	default:
		return fmt.Sprintf("entry %q has a %s of %d, past the cap of %d", e.Entry, e.Limit, e.Got, e.Max)
	}
}

// Layer is one layer of an image: its name for errors (a digest) and how
// to open its uncompressed tar stream.
type Layer struct {
	Name string
	Open func() (io.ReadCloser, error)
}

// The OCI image spec's whiteouts (layer.md, "Whiteouts").
const (
	whiteoutPrefix = ".wh."
	opaqueWhiteout = ".wh..wh..opq"
)

// ExtractLayers writes the image whose layers are given, lowest first,
// flattened under dst, within lim. It reads the top layer first, as
// go-containerregistry's mutate.Extract does, so that what an upper layer
// replaces or whites out (".wh.<name>", or ".wh..wh..opq" for a whole
// dir) is never written: what is counted against lim.Bytes is what stays
// on disk. Each stream is read to its end, so that a layer whose reader
// checks its digest at EOF is checked. An error names the layer; one of
// lim's is a *LimitError under it. On error dst holds a partial tree: the
// caller removes it.
func ExtractLayers(dst string, layers []Layer, lim Limits) error {
	x, err := newExtraction(dst, lim)
	if err != nil {
		return err
	}
	f := flattening{seen: map[string]bool{}, opaque: map[string]bool{}}
	for i := len(layers) - 1; i >= 0; i-- {
		if err := f.layer(x, layers[i]); err != nil {
			return fmt.Errorf("layer %s: %w", layers[i].Name, err)
		}
	}
	return nil
}

// flattening is what the upper layers read so far hide from the lower
// ones.
type flattening struct {
	// seen holds every path an upper layer had an entry for: true when
	// it hides what is below it too (a whiteout, or a non-dir).
	seen map[string]bool
	// opaque holds the dirs whose lower layers' entries are hidden.
	opaque map[string]bool
}

func (f flattening) layer(x *extraction, l Layer) error {
	rc, err := l.Open()
	if err != nil {
		return err
	}
	defer rc.Close()
	// An opaque marker hides only the layers below its own.
	opaque := map[string]bool{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		rel, err := x.entry(h)
		if err != nil {
			return err
		}
		name := strings.TrimPrefix(rel, "/")
		if name == "" {
			continue
		}
		dir, base := path.Dir(name), path.Base(name)
		if base == opaqueWhiteout {
			opaque[dir] = true
			continue
		}
		tombstone := strings.HasPrefix(base, whiteoutPrefix)
		if tombstone {
			name = path.Join(dir, strings.TrimPrefix(base, whiteoutPrefix))
		}
		if _, ok := f.seen[name]; ok && !tombstone {
			continue
		}
		if f.hidden(name) {
			continue
		}
		f.seen[name] = tombstone || h.Typeflag != tar.TypeDir
		if tombstone {
			continue
		}
		if err := x.write(h, rel, tr); err != nil {
			return err
		}
	}
	for d := range opaque {
		f.opaque[d] = true
	}
	_, err = io.Copy(io.Discard, rc)
	return err
}

// hidden says whether an upper layer hides name: one of its parents is
// whited out, a non-dir, or opaque.
func (f flattening) hidden(name string) bool {
	for d := path.Dir(name); ; d = path.Dir(d) {
		if f.seen[d] || f.opaque[d] {
			return true
		}
		if d == "." || d == "/" {
			return false
		}
	}
}
