package vm_test

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// guestDir is where hack/guest/build.sh left the test guest.
func guestDir(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("VMPOD_GUEST_DIR")
	if dir == "" {
		dir = "../../_output/guest"
	}
	if _, err := os.Stat(filepath.Join(dir, "containerdisk.oci.tar")); err != nil {
		t.Fatalf("test guest missing (%v): run `make guest` or hack/guest/build.sh", err)
	}
	return dir
}

var unpacked struct {
	once   sync.Once
	rootfs string
	err    error
}

// containerdiskRootfs unpacks the test guest's containerdisk the way a
// container runtime would (the image's layers, flattened) and returns its
// root filesystem. It is unpacked once per test binary.
func containerdiskRootfs(t testing.TB) string {
	t.Helper()
	dir := guestDir(t)
	unpacked.once.Do(func() {
		unpacked.rootfs, unpacked.err = unpack(filepath.Join(dir, "containerdisk.oci.tar"))
	})
	if unpacked.err != nil {
		t.Fatal(unpacked.err)
	}
	return unpacked.rootfs
}

func unpack(archive string) (string, error) {
	tmp, err := os.MkdirTemp("", "vmpod-containerdisk-")
	if err != nil {
		return "", err
	}
	cleanupAtExit(func() { os.RemoveAll(tmp) })
	layoutDir, rootfs := filepath.Join(tmp, "layout"), filepath.Join(tmp, "rootfs")
	f, err := os.Open(archive)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if err := untar(f, layoutDir); err != nil {
		return "", fmt.Errorf("OCI archive: %w", err)
	}
	idx, err := layout.ImageIndexFromPath(layoutDir)
	if err != nil {
		return "", err
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return "", err
	}
	if len(m.Manifests) != 1 {
		return "", fmt.Errorf("OCI archive holds %d images, want 1", len(m.Manifests))
	}
	img, err := idx.Image(m.Manifests[0].Digest)
	if err != nil {
		return "", err
	}
	fs := mutate.Extract(img)
	defer fs.Close()
	if err := untar(fs, rootfs); err != nil {
		return "", fmt.Errorf("image layers: %w", err)
	}
	return rootfs, nil
}

func untar(r io.Reader, dst string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.Clean(h.Name)
		if filepath.IsAbs(name) || strings.HasPrefix(name, "..") {
			return fmt.Errorf("entry %q leaves the archive", h.Name)
		}
		p := filepath.Join(dst, name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode)&0o777)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		default:
			return fmt.Errorf("entry %q: unexpected type %c", h.Name, h.Typeflag)
		}
	}
}

var atExit []func()

func cleanupAtExit(f func()) { atExit = append(atExit, f) }

func TestMain(m *testing.M) {
	code := m.Run()
	for _, f := range atExit {
		f()
	}
	os.Exit(code)
}
