package main

import (
	"archive/tar"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// TestFlags: each -archive is served as the -image after it, or as the
// test guest's name without one; an -image before any -archive is an
// error.
func TestFlags(t *testing.T) {
	parse := func(args ...string) ([]served, error) {
		fs := flag.NewFlagSet("registry", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		var s servedFlags
		fs.Var(archive{&s}, "archive", "")
		fs.Var(image{&s}, "image", "")
		return s.list, fs.Parse(args)
	}
	got, err := parse("-archive", "g.tar", "-archive", "b.tar", "-image", "vmpod/busybox:v1")
	if err != nil {
		t.Fatal(err)
	}
	want := []served{{"g.tar", "vmpod/test-guest:v1"}, {"b.tar", "vmpod/busybox:v1"}}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(served{})); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if _, err := parse("-image", "vmpod/busybox:v1"); err == nil {
		t.Error("an -image before any -archive: no error")
	}
}

// TestServeSeveral: two archives, each pulled back by its name, the very
// image; a name given twice is an error.
func TestServeSeveral(t *testing.T) {
	dir := t.TempDir()
	var want []v1.Hash
	var images []served
	for i, repoTag := range []string{"vmpod/test-guest:v1", "vmpod/busybox:v1"} {
		img, err := random.Image(256, 2)
		if err != nil {
			t.Fatal(err)
		}
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, d)
		images = append(images, served{ociArchive(t, filepath.Join(dir, fmt.Sprintf("%d.oci.tar", i)), img), repoTag})
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := serve(l, t.TempDir(), images); err != nil {
		t.Fatal(err)
	}
	for i, s := range images {
		ref, err := name.ParseReference(l.Addr().String()+"/"+s.repoTag, name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		img, err := remote.Image(ref)
		if err != nil {
			t.Fatalf("pull %s: %v", ref, err)
		}
		if got, err := img.Digest(); err != nil || got != want[i] {
			t.Errorf("%s: digest %v, %v; want %v", ref, got, err, want[i])
		}
	}

	l2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if err := serve(l2, t.TempDir(), []served{images[0], {images[1].archive, images[0].repoTag}}); err == nil {
		t.Error("a name served twice: no error")
	}
}

// ociArchive writes img as an OCI image layout tarball at path, as
// hack/ociimage and hack/guest/build.sh do, and returns path.
func ociArchive(t *testing.T, path string, img v1.Image) string {
	t.Helper()
	dir := t.TempDir()
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	if err := tw.AddFS(os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}
