// Package untar writes a tar stream (an image's layers, an OCI archive)
// under a dir without letting any name in it reach outside, and, for an
// image's layers, without letting it write more than its Limits. It may
// import filepath-securejoin, golang.org/x/sys/unix and the standard
// library.
package untar

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	securejoin "github.com/cyphar/filepath-securejoin"
	"golang.org/x/sys/unix"
)

// Extract writes the tar stream r under dst. Its content is the pod
// author's: every name resolves inside dst (securejoin), so neither a
// ../ nor a symlink the image made earlier can take a write outside it;
// files are created without following links. Device nodes, fifos and
// sockets are skipped: an image has no use for them on the host.
// Extract applies no Limits and no whiteouts: ExtractLayers does.
func Extract(r io.Reader, dst string) error {
	x, err := newExtraction(dst, Limits{})
	if err != nil {
		return err
	}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		rel, err := x.entry(h)
		if err != nil {
			return err
		}
		if err := x.write(h, rel, tr); err != nil {
			return err
		}
	}
}

// extraction writes entries under root and counts them against lim.
type extraction struct {
	root           string
	lim            Limits
	bytes, entries uint64
}

func newExtraction(root string, lim Limits) (*extraction, error) {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	return &extraction{root: root, lim: lim}, nil
}

// entry counts h, read from a stream whether it is written or not, and
// checks its name: the clean path it names, "/" first, or a LimitError.
func (x *extraction) entry(h *tar.Header) (string, error) {
	x.entries++
	if x.lim.Entries > 0 && x.entries > x.lim.Entries {
		return "", &LimitError{Entry: h.Name, Limit: LimitEntries, Max: x.lim.Entries, Got: x.entries}
	}
	if len(h.Name) > MaxPathLen {
		return "", &LimitError{Entry: h.Name[:64] + "...", Limit: LimitPathLen, Max: MaxPathLen, Got: uint64(len(h.Name))}
	}
	rel := filepath.Clean("/" + h.Name)
	if d := depth(rel); x.lim.Depth > 0 && d > x.lim.Depth {
		return "", &LimitError{Entry: h.Name, Limit: LimitDepth, Max: uint64(x.lim.Depth), Got: uint64(d)}
	}
	return rel, nil
}

// write writes the entry h, whose clean name is rel, with its content r.
func (x *extraction) write(h *tar.Header, rel string, r io.Reader) error {
	if rel == "/" {
		return nil
	}
	parent, err := securejoin.SecureJoin(x.root, filepath.Dir(rel))
	if err != nil {
		return fmt.Errorf("%s: %w", h.Name, err)
	}
	if err := x.mkdirAll(h, parent); err != nil {
		return err
	}
	p := filepath.Join(parent, filepath.Base(rel))
	mode := os.FileMode(h.Mode) & 0o7777
	switch h.Typeflag {
	case tar.TypeDir:
		if err := os.Mkdir(p, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
		if err := noLink(p); err != nil {
			return err
		}
		if err := os.Chmod(p, mode|0o700); err != nil {
			return err
		}
	case tar.TypeReg, tar.TypeGNUSparse:
		// archive/tar expands a sparse entry (GNU's old 'S' type, or
		// GNU's PAX sparse records on a regular file): h.Size is its
		// real size and r yields every byte of it, holes as zeros,
		// which is what lands on disk and so what counts.
		if h.Size < 0 {
			return fmt.Errorf("%s: size %d", h.Name, h.Size)
		}
		if x.lim.Bytes > 0 && x.bytes+uint64(h.Size) > x.lim.Bytes {
			return &LimitError{Entry: h.Name, Limit: LimitBytes, Max: x.lim.Bytes, Got: x.bytes + uint64(h.Size), Size: uint64(h.Size)}
		}
		n, err := writeFile(p, io.LimitReader(r, h.Size), mode)
		x.bytes += uint64(n)
		if err != nil {
			return fmt.Errorf("%s: %w", h.Name, err)
		}
	case tar.TypeSymlink:
		if err := replace(p); err != nil {
			return err
		}
		if err := os.Symlink(h.Linkname, p); err != nil {
			return err
		}
	case tar.TypeLink:
		target, err := securejoin.SecureJoin(x.root, h.Linkname)
		if err != nil {
			return fmt.Errorf("%s: %w", h.Name, err)
		}
		if err := replace(p); err != nil {
			return err
		}
		if err := os.Link(target, p); err != nil {
			return fmt.Errorf("%s: hard link to %s: %w", h.Name, h.Linkname, err)
		}
	default:
		// Devices, fifos and the rest: not on the host.
	}
	return nil
}

// mkdirAll makes dir, the parent of h's path resolved under the root,
// counting each dir it makes as an entry: a path implies its parents.
func (x *extraction) mkdirAll(h *tar.Header, dir string) error {
	var missing uint64
	for d := dir; len(d) > len(x.root); d = filepath.Dir(d) {
		_, err := os.Lstat(d)
		if err == nil {
			break
		}
		if !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%s: %w", h.Name, err)
		}
		missing++
	}
	if missing == 0 {
		return nil
	}
	x.entries += missing
	if x.lim.Entries > 0 && x.entries > x.lim.Entries {
		return &LimitError{Entry: h.Name, Limit: LimitEntries, Max: x.lim.Entries, Got: x.entries}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("%s: %w", h.Name, err)
	}
	return nil
}

// depth is the number of components of the clean absolute path p.
func depth(p string) int {
	if p == "/" {
		return 0
	}
	return strings.Count(p, "/")
}

// writeFile creates p anew (never through a link) with the content of r,
// and says how many bytes it wrote.
func writeFile(p string, r io.Reader, mode os.FileMode) (int64, error) {
	if err := replace(p); err != nil {
		return 0, err
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, mode|0o600)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(p, mode)
	}
	return n, err
}

// replace removes what a later layer's entry replaces at p, but a dir.
func replace(p string) error {
	fi, err := os.Lstat(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return fmt.Errorf("%s: a dir is in the way", strings.TrimPrefix(p, "/"))
	}
	return os.Remove(p)
}

// noLink refuses p when it is a symlink (a dir entry over an earlier link).
func noLink(p string) error {
	fi, err := os.Lstat(p)
	if err != nil {
		return err
	}
	if fi.Mode()&os.ModeSymlink != 0 {
		return fmt.Errorf("%s: a dir entry over a symlink", p)
	}
	return nil
}
