// Command registry serves OCI archives (image layout tarballs, such as
// hack/guest/build.sh's containerdisk.oci.tar or hack/local/images.sh's
// busybox.oci.tar) as images of a registry on -listen, until it is
// stopped. hack/local-up.sh runs it on the loopback of the VM-only node's
// network namespace, on port 80, so that `vm-runtime cri` pulls
// localhost/vmpod/test-guest:v1 (go-containerregistry speaks plain HTTP to
// localhost) and localhost/vmpod/busybox:v1 (an image volume's) under the
// very names the first node imported into containerd; nothing listens
// outside that namespace.
//
// Each -archive is served as the -image given after it:
//
//	registry -listen 127.0.0.1:80 -archive guest.oci.tar -image vmpod/test-guest:v1 \
//	  -archive busybox.oci.tar -image vmpod/busybox:v1
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/vmpod/vmpod/internal/testguest"
)

// served is one archive and the repository:tag it is served as.
type served struct{ archive, repoTag string }

// servedFlags collects -archive and -image in their order.
type servedFlags struct{ list []served }

// archive is -archive: a new image, served as the default name until an
// -image follows it.
type archive struct{ *servedFlags }

func (a archive) String() string { return "" }
func (a archive) Set(v string) error {
	a.list = append(a.list, served{archive: v, repoTag: defaultRepoTag})
	return nil
}

// image is -image: the name of the last -archive.
type image struct{ *servedFlags }

func (i image) String() string { return "" }
func (i image) Set(v string) error {
	if len(i.list) == 0 {
		return fmt.Errorf("-image %q: no -archive before it", v)
	}
	i.list[len(i.list)-1].repoTag = v
	return nil
}

const defaultRepoTag = "vmpod/test-guest:v1"

func main() {
	listen := flag.String("listen", "127.0.0.1:80", "address to serve the registry on")
	var images servedFlags
	flag.Var(archive{&images}, "archive", "an OCI archive to serve (repeatable)")
	flag.Var(image{&images}, "image", "repository:tag to serve the -archive before it as (default "+defaultRepoTag+")")
	flag.Parse()
	if len(images.list) == 0 {
		log.Fatal("registry: -archive is required")
	}
	dir, err := os.MkdirTemp("", "vmpod-registry-")
	if err != nil {
		log.Fatalf("registry: %v", err)
	}
	defer os.RemoveAll(dir)
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatalf("registry: %v", err)
	}
	if err := serve(l, dir, images.list); err != nil {
		log.Fatalf("registry: %v", err)
	}
	select {}
}

// serve serves a registry on l holding each archive as its name (its
// blobs unpacked below dir, which must outlive the registry), and
// returns once all are pushed.
func serve(l net.Listener, dir string, images []served) error {
	h := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(l)
	seen := map[string]bool{}
	for i, s := range images {
		if seen[s.repoTag] {
			return fmt.Errorf("%s: served twice", s.repoTag)
		}
		seen[s.repoTag] = true
		img, err := testguest.OpenArchive(s.archive, filepath.Join(dir, fmt.Sprint(i)))
		if err != nil {
			return fmt.Errorf("%s: %w", s.archive, err)
		}
		// The push goes through the listener just opened, on the loopback.
		ref, err := name.ParseReference(l.Addr().String()+"/"+s.repoTag, name.Insecure)
		if err != nil {
			return err
		}
		if err := remote.Write(ref, img); err != nil {
			return fmt.Errorf("push %s: %w", ref, err)
		}
		log.Printf("registry: serving %s as %s on %s", s.archive, s.repoTag, l.Addr())
	}
	return nil
}
