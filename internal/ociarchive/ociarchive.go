// Package ociarchive writes an image as an OCI image layout archive that
// `ctr images import` takes, named by the annotations containerd reads,
// and opens one. The project's image builders (hack/guest/containerdisk,
// hack/ociimage, vm-runtime checkpoint-image) use it. It may import
// go-containerregistry, internal/untar and the standard library.
package ociarchive

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"

	"github.com/vmpod/vmpod/internal/untar"
)

// Open unpacks the OCI layout archive into dir (which must outlive the
// image: its blobs are read from there) and returns its single image.
func Open(archive, dir string) (v1.Image, error) {
	f, err := os.Open(archive)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := untar.Extract(f, dir); err != nil {
		return nil, fmt.Errorf("OCI archive %s: %w", archive, err)
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("OCI archive %s: %w", archive, err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("OCI archive %s: %w", archive, err)
	}
	if len(m.Manifests) != 1 {
		return nil, fmt.Errorf("OCI archive %s holds %d images, want 1", archive, len(m.Manifests))
	}
	return idx.Image(m.Manifests[0].Digest)
}

// Write writes img as an OCI layout archive at out, named name, with every
// timestamp set to mtime so that builds are reproducible. out appears whole
// or not at all.
func Write(out string, img v1.Image, name string, mtime time.Time) error {
	dir, err := os.MkdirTemp(filepath.Dir(out), ".oci-layout-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	// ref.name is the OCI convention; containerd's importer prefers
	// io.containerd.image.name and falls back to ref.name.
	if err := lp.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": name,
		"io.containerd.image.name":          name,
	})); err != nil {
		return err
	}
	tmp := out + ".tmp"
	if err := tarDir(tmp, dir, mtime); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, out)
}

// tarDir archives an OCI layout directory with paths relative to its root
// (oci-layout, index.json, blobs/sha256/...), as image importers expect.
func tarDir(out, dir string, mtime time.Time) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: rel + "/", Mode: 0o755, ModTime: mtime})
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s: unexpected file type in layout", p)
		}
		src, err := os.Open(p)
		if err != nil {
			return err
		}
		defer src.Close()
		st, err := src.Stat()
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: rel, Mode: 0o644, Size: st.Size(), ModTime: mtime}); err != nil {
			return err
		}
		_, err = io.Copy(tw, src)
		return err
	})
	return errors.Join(err, tw.Close(), f.Close())
}
