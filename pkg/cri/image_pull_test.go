package cri

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/vmpod/vmpod/internal/testenv/hostiletar"
	"github.com/vmpod/vmpod/pkg/vmd"
)

// TestPullImageBounds: an image whose layers would unpack past one of the
// node's bounds (bytes, sparse entries at their real size, entries, path
// depth) fails to pull with ResourceExhausted, naming the image, the
// layer, the entry and the bound, and leaves nothing in the image store.
func TestPullImageBounds(t *testing.T) {
	const maxBytes, maxEntries, maxDepth = 1 << 20, 100, 32
	s := newImageServer(t, func(c *Config) {
		c.ImageMaxBytes, c.ImageMaxEntries, c.ImageMaxDepth = maxBytes, maxEntries, maxDepth
	})
	host := serveRegistry(t, nil)
	disk := hostiletar.Of(hostiletar.Entry{Name: "disk/", Type: tar.TypeDir},
		hostiletar.Entry{Name: "disk/guest.qcow2", Type: tar.TypeReg, Body: []byte("QFI\xfb")})
	for _, tc := range []struct {
		name  string
		layer []byte
		entry string // the entry the error names; "": the pull succeeds
		bound string // in the error
	}{
		// 64 MiB of zeros is 64 KiB of gzip; on a node's cap of 20 GiB,
		// 20 MiB of gzip would fill it.
		{"a gzip of zeros", hostiletar.Zeros("disk/zero.raw", 64<<20), "disk/zero.raw", fmt.Sprintf("cap of %d bytes (vm-runtime cri --image-max-bytes)", maxBytes)},
		// 1.5 KiB of tar claiming 256 MiB (or a TiB: the header decides).
		{"a PAX sparse entry", hostiletar.PAXSparse("disk/sparse.raw", 256<<20), "disk/sparse.raw", "--image-max-bytes"},
		{"an old GNU sparse entry", hostiletar.GNUSparse("disk/sparse.raw", 256<<20), "disk/sparse.raw", "--image-max-bytes"},
		{"too many files", hostiletar.ManyFiles(5 * maxEntries), "many/99", fmt.Sprintf("cap of %d entries", maxEntries)},
		{"too deep a path", hostiletar.Deep(maxDepth + 1), strings.Repeat("d/", maxDepth) + "f", fmt.Sprintf("past the cap of %d (vm-runtime cri --image-max-depth)", maxDepth)},
		{"a containerdisk within the bounds", disk, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ref := host + "/vmpod/" + strings.ToLower(strings.ReplaceAll(tc.name, " ", "-")) + ":v1"
			img := pushImage(t, ref, tc.layer)
			layers, _ := img.Layers()
			digest, _ := layers[0].Digest()
			size, _ := layers[0].Size()
			t.Logf("layer %s: %d bytes in the registry", digest, size)
			if size > 256<<10 {
				t.Fatalf("the hostile layer is %d bytes compressed, want it tiny", size)
			}

			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			_, err := s.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
			if tc.entry == "" {
				if err != nil {
					t.Fatalf("PullImage: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("PullImage: no error, want ResourceExhausted")
			}
			t.Log(err)
			if !errdefs.IsResourceExhausted(err) || status.Code(toStatus(ctx, "PullImage", err)) != codes.ResourceExhausted {
				t.Errorf("PullImage: %v, want ResourceExhausted", err)
			}
			for _, want := range []string{ref, "layer " + digest.String(), fmt.Sprintf("%q", tc.entry), tc.bound} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the error does not say %q", want)
				}
			}
			if got, _ := s.ListImages(ctx, &runtimeapi.ListImagesRequest{}); len(got.GetImages()) != 0 {
				t.Errorf("ListImages after a refused pull: %v", got.GetImages())
			}
			left, _ := filepath.Glob(filepath.Join(s.cfg.imageDir(), "*", "*"))
			if len(left) != 0 {
				t.Errorf("the refused pull left %v", left)
			}
		})
	}
}

// TestSlowPullHoldsUpNothing: while a registry stalls a pull in the
// middle of a layer, pulls of other images and the removal of another
// image go on; a second pull of the stalled image waits for the first and
// the image is unpacked once.
func TestSlowPullHoldsUpNothing(t *testing.T) {
	s := newImageServer(t, nil)
	var (
		slowBlob  atomic.Value // the path of the stalled layer's blob
		stalled   = make(chan struct{})
		stallOnce sync.Once
		release   = make(chan struct{})
		slowGets  atomic.Int32
	)
	host := serveRegistry(t, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if p, _ := slowBlob.Load().(string); r.Method == http.MethodGet && p != "" && r.URL.Path == p {
				slowGets.Add(1)
				stallOnce.Do(func() { close(stalled) })
				select {
				case <-release:
				case <-r.Context().Done():
					return
				}
			}
			next.ServeHTTP(w, r)
		})
	})
	var releaseOnce sync.Once
	unstall := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unstall) // before the registry closes: it waits for its requests

	layer := func(name string) []byte {
		return hostiletar.Of(hostiletar.Entry{Name: "disk/" + name, Type: tar.TypeReg, Body: []byte(name)})
	}
	slowRef, slowRef2 := host+"/vmpod/slow:v1", host+"/vmpod/slow:v2"
	slow := pushImage(t, slowRef, layer("slow.raw"))
	pushImage(t, slowRef2, layer("slow.raw"))
	layers, _ := slow.Layers()
	d, _ := layers[0].Digest()
	fastRef, goneRef := host+"/vmpod/fast:v1", host+"/vmpod/gone:v1"
	pushImage(t, fastRef, layer("fast.raw"))
	pushImage(t, goneRef, layer("gone.raw"))

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pull := func(ref string) error {
		_, err := s.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
		return err
	}
	if err := pull(goneRef); err != nil {
		t.Fatal(err)
	}

	slowBlob.Store("/v2/vmpod/slow/blobs/" + d.String())
	slowDone, slowDone2 := make(chan error, 1), make(chan error, 1)
	go func() { slowDone <- pull(slowRef) }()
	select {
	case <-stalled:
	case err := <-slowDone:
		t.Fatalf("the slow pull ended before its layer was served: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("the slow pull never asked for its layer")
	}
	go func() { slowDone2 <- pull(slowRef2) }()

	// within runs f while the slow pull is stalled: it must end in 20 s.
	within := func(what string, f func() error) {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- f() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s while another pull is stalled: %v", what, err)
			}
		case <-time.After(20 * time.Second):
			t.Errorf("%s did not end in 20 s while another pull was stalled", what)
		}
	}
	within("PullImage of another image", func() error { return pull(fastRef) })
	within("RemoveImage of another image", func() error {
		_, err := s.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: goneRef}})
		return err
	})
	within("ListImages", func() error {
		_, err := s.ListImages(ctx, &runtimeapi.ListImagesRequest{})
		return err
	})
	if _, ok := s.images.Get(goneRef); ok {
		t.Error("the removed image is still stored")
	}
	select {
	case err := <-slowDone2:
		t.Errorf("the second pull of the stalled image ended before the first: %v", err)
	default:
	}

	unstall()
	for _, c := range []chan error{slowDone, slowDone2} {
		select {
		case err := <-c:
			if err != nil {
				t.Errorf("the slow image's pull: %v", err)
			}
		case <-time.After(time.Minute):
			t.Fatal("the slow image's pull did not end once its layer was served")
		}
	}
	if n := slowGets.Load(); n != 1 {
		t.Errorf("the stalled layer was fetched %d times, want once (one unpack for both pulls)", n)
	}
	img, ok := s.images.Get(slowRef)
	if !ok || len(img.RepoTags) != 2 {
		t.Errorf("the slow image: %+v, %v; want it stored with both tags", img, ok)
	}
}

// newImageServer is newIdleServer with the config edit makes.
func newImageServer(t *testing.T, edit func(*Config)) *Server {
	t.Helper()
	dir := t.TempDir()
	cfg := Config{Config: vmd.Config{StateRoot: dir}, NetnsDir: dir + "/netns", CNIConfDir: dir + "/cni"}
	if edit != nil {
		edit(&cfg)
	}
	s, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// serveRegistry serves an empty registry (go-containerregistry's) on the
// loopback, its handler wrapped by wrap (nil: none), until the test ends,
// and returns its host:port.
func serveRegistry(t *testing.T, wrap func(http.Handler) http.Handler) string {
	t.Helper()
	h := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// pushImage pushes an image of the layers (tar streams, gzip'd here as
// tightly as gzip goes) as ref and returns it.
func pushImage(t *testing.T, ref string, tars ...[]byte) v1.Image {
	t.Helper()
	img := empty.Image
	for _, b := range tars {
		l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
			tarball.WithCompressionLevel(gzip.BestCompression))
		if err != nil {
			t.Fatal(err)
		}
		if img, err = mutate.AppendLayers(img, l); err != nil {
			t.Fatal(err)
		}
	}
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	return img
}
