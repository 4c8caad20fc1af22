// Package untar writes a tar stream (an image's layers, an OCI archive)
// under a dir without letting any name in it reach outside. It may import
// filepath-securejoin, golang.org/x/sys/unix and the standard library.
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
func Extract(r io.Reader, dst string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
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
		rel := filepath.Clean("/" + h.Name)
		if rel == "/" {
			continue
		}
		parent, err := securejoin.SecureJoin(dst, filepath.Dir(rel))
		if err != nil {
			return fmt.Errorf("%s: %w", h.Name, err)
		}
		if err := os.MkdirAll(parent, 0o755); err != nil {
			return fmt.Errorf("%s: %w", h.Name, err)
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
		case tar.TypeReg:
			if err := writeFile(p, tr, mode); err != nil {
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
			target, err := securejoin.SecureJoin(dst, h.Linkname)
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
	}
}

// writeFile creates p anew (never through a link) with the content of r.
func writeFile(p string, r io.Reader, mode os.FileMode) error {
	if err := replace(p); err != nil {
		return err
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, mode|0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(p, mode)
	}
	return err
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
