package cri

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestRemoveImageWhileCreating: RemoveImage refuses an image that a
// CreateContainer holds (useImage, from the image's lookup until the
// container is in the server's table), and removes it once released.
func TestRemoveImageWhileCreating(t *testing.T) {
	ctx := context.Background()
	s := newIdleServer(t)
	// A stored image, as a pull leaves its record.
	const ref = "localhost/vmpod/held:v1"
	img := &image{ID: "sha256:" + strings.Repeat("ab", 32), RepoTags: []string{ref}}
	p, err := s.images.path(img.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(p, "rootfs"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := s.images.save(img); err != nil {
		t.Fatal(err)
	}
	s.images.mu.Lock()
	s.images.images[img.ID] = img
	s.images.mu.Unlock()
	remove := func() error {
		_, err := s.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
		return err
	}

	got, release, err := s.useImage(ref)
	if err != nil || got.ID != img.ID {
		t.Fatalf("useImage(%q) = %v, %v; want %s", ref, got.ID, err, img.ID)
	}
	if err := remove(); !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "being made") {
		t.Errorf("RemoveImage of an image a container is being made from: %v, want FailedPrecondition saying so", err)
	}
	if _, ok := s.images.Get(ref); !ok {
		t.Fatal("the image is gone while held")
	}
	release()
	if err := remove(); err != nil {
		t.Errorf("RemoveImage once released: %v", err)
	}
	if _, ok := s.images.Get(ref); ok {
		t.Error("the image is still stored after RemoveImage")
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Errorf("the image's files are left: %v", err)
	}
	if _, _, err := s.useImage(ref); !errdefs.IsNotFound(err) {
		t.Errorf("useImage of a removed image: %v, want NotFound", err)
	}
}

// TestCRIImageUser: ImageStatus gives the image config's user as a uid
// or a name, without its group, as containerd does.
func TestCRIImageUser(t *testing.T) {
	for user, want := range map[string]struct {
		uid  int64
		name string
	}{
		"":                  {-1, ""},
		"1002":              {1002, ""},
		"1003:users":        {1003, ""},
		"0":                 {0, ""},
		"www-data":          {-1, "www-data"},
		"www-data:www-data": {-1, "www-data"},
	} {
		got := criImage(image{ID: "sha256:x", User: user})
		gotUID := int64(-1)
		if got.Uid != nil {
			gotUID = got.Uid.Value
		}
		if gotUID != want.uid || got.Username != want.name {
			t.Errorf("user %q: uid %d, name %q; want %d, %q", user, gotUID, got.Username, want.uid, want.name)
		}
	}
}
