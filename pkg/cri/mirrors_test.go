package cri

import (
	"archive/tar"
	"context"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/vmpod/vmpod/internal/testenv/hostiletar"
)

// TestPullThroughMirror: an image of a mirrored registry is fetched from
// the mirror at the same path, by tag or digest, and keeps its own name:
// ImageStatus and ListImages know it as the kubelet asked for it. Its
// registry is never reached (none answers on this machine: a pull from it
// would fail). A mirror that does not have it fails the pull as
// NotFound, naming the mirror.
func TestPullThroughMirror(t *testing.T) {
	var mu sync.Mutex
	var paths []string
	mirror := serveRegistry(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			paths = append(paths, r.URL.Path)
			mu.Unlock()
			h.ServeHTTP(w, r)
		})
	})
	disk := hostiletar.Of(hostiletar.Entry{Name: "disk/", Type: tar.TypeDir},
		hostiletar.Entry{Name: "disk/guest.qcow2", Type: tar.TypeReg, Body: []byte("QFI\xfb")})
	img := pushImage(t, mirror+"/e2e-test-images/busybox:1.29-2", disk)
	digest, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	s := newImageServer(t, func(c *Config) {
		c.RegistryMirrors = Mirrors{"registry.k8s.io": &url.URL{Scheme: "http", Host: mirror}}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	const upstream = "registry.k8s.io/e2e-test-images/busybox"
	for _, ref := range []string{upstream + ":1.29-2", upstream + "@" + digest.String()} {
		resp, err := s.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
		if err != nil {
			t.Fatalf("pull %s through the mirror: %v", ref, err)
		}
		st, err := s.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
		if err != nil || st.GetImage().GetId() != resp.ImageRef {
			t.Fatalf("ImageStatus %s: %v, %v; want the pulled %s", ref, st.GetImage(), err, resp.ImageRef)
		}
		if !slices.Contains(st.GetImage().GetRepoTags(), upstream+":1.29-2") || !slices.Contains(st.GetImage().GetRepoDigests(), upstream+"@"+digest.String()) {
			t.Errorf("image %s: tags %v, digests %v; want its upstream name", ref, st.GetImage().GetRepoTags(), st.GetImage().GetRepoDigests())
		}
	}
	mu.Lock()
	asked := strings.Join(paths, " ")
	mu.Unlock()
	if !strings.Contains(asked, "/v2/e2e-test-images/busybox/manifests/") {
		t.Errorf("the mirror was not asked for the image's path: %s", asked)
	}

	_, err = s.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "registry.k8s.io/absent:v1"}})
	if !errdefs.IsNotFound(err) || !strings.Contains(err.Error(), "mirror "+mirror) {
		t.Errorf("an image the mirror lacks: %v, want NotFound naming the mirror %s", err, mirror)
	}
}

// TestParseMirror: HOST=URL with an http or https URL and no path.
func TestParseMirror(t *testing.T) {
	host, u, err := ParseMirror("docker.io=https://mirror.example:8443/")
	if err != nil || host != "docker.io" || u.String() != "https://mirror.example:8443" {
		t.Errorf("%s, %v, %v", host, u, err)
	}
	for _, bad := range []string{"", "docker.io", "docker.io=", "=http://x", "docker.io=x", "docker.io=ftp://x",
		"docker.io=http://x/v2", "docker.io=http://x?q", "docker.io=http://u:p@x", "a/b=http://x"} {
		if _, _, err := ParseMirror(bad); !errdefs.IsInvalidArgument(err) {
			t.Errorf("%q: %v, want InvalidArgument", bad, err)
		}
	}
}
