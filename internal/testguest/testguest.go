// Package testguest gives tests the test guest that hack/guest/build.sh
// builds: its files, and its containerdisk unpacked the way a container
// runtime unpacks an image. It may import go-containerregistry, internal/untar
// and the standard library.
package testguest

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/vmpod/vmpod/internal/ociarchive"
	"github.com/vmpod/vmpod/internal/untar"
)

// Image is the containerdisk's image reference.
const Image = "localhost/vmpod/test-guest:v1"

// Dir is where the test guest was built: $VMPOD_GUEST_DIR, else
// <repo>/_output/guest. The test fails, saying how to build it, if it is
// missing.
func Dir(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("VMPOD_GUEST_DIR")
	if dir == "" {
		_, file, _, _ := runtime.Caller(0)
		dir = filepath.Join(filepath.Dir(file), "..", "..", "_output", "guest")
	}
	if _, err := os.Stat(filepath.Join(dir, "containerdisk.oci.tar")); err != nil {
		t.Fatalf("test guest missing (%v): run `make guest` (hack/guest/build.sh)", err)
	}
	return dir
}

// Archive is the containerdisk OCI archive.
func Archive(t testing.TB) string { return filepath.Join(Dir(t), "containerdisk.oci.tar") }

// Rootfs unpacks the containerdisk into a fresh dir under parent (so that
// the test owns and removes it) and returns it.
func Rootfs(t testing.TB, parent string) string {
	t.Helper()
	dst := filepath.Join(parent, "rootfs")
	if err := Unpack(Archive(t), dst); err != nil {
		t.Fatal(err)
	}
	return dst
}

// Unpack writes the flattened layers of the single image in an OCI
// archive to dst.
func Unpack(archive, dst string) error {
	tmp, err := os.MkdirTemp("", "vmpod-oci-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	img, err := OpenArchive(archive, tmp)
	if err != nil {
		return err
	}
	fs := mutate.Extract(img)
	defer fs.Close()
	if err := untar.Extract(fs, dst); err != nil {
		return fmt.Errorf("image layers: %w", err)
	}
	return nil
}

// OpenArchive unpacks the OCI archive into the layout dir dir (which must
// outlive the image: its blobs are read from there) and returns its single
// image, to serve from a test registry for instance (ociarchive.Open).
func OpenArchive(archive, dir string) (v1.Image, error) { return ociarchive.Open(archive, dir) }
