// Command registry serves one OCI archive (an image layout tarball, such as
// hack/guest/build.sh's containerdisk.oci.tar) as an image of a registry
// on -listen, until it is stopped. hack/local-up.sh runs it on the loopback
// of the VM-only node's network namespace, on port 80, so that `vm-runtime
// cri` pulls localhost/vmpod/test-guest:v1 (go-containerregistry speaks
// plain HTTP to localhost) under the very name the first node imported
// into containerd; nothing listens outside that namespace.
package main

import (
	"flag"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/vmpod/vmpod/internal/testguest"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:80", "address to serve the registry on")
	archive := flag.String("archive", "", "the OCI archive to serve")
	repoTag := flag.String("image", "vmpod/test-guest:v1", "repository:tag to serve it as")
	flag.Parse()
	if *archive == "" {
		log.Fatal("registry: -archive is required")
	}
	dir, err := os.MkdirTemp("", "vmpod-registry-")
	if err != nil {
		log.Fatalf("registry: %v", err)
	}
	defer os.RemoveAll(dir)
	img, err := testguest.OpenArchive(*archive, dir)
	if err != nil {
		log.Fatalf("registry: %s: %v", *archive, err)
	}
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatalf("registry: %v", err)
	}
	h := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(l)
	// The push goes through the listener just opened, on the loopback.
	ref, err := name.ParseReference(l.Addr().String()+"/"+*repoTag, name.Insecure)
	if err != nil {
		log.Fatalf("registry: %v", err)
	}
	if err := remote.Write(ref, img); err != nil {
		log.Fatalf("registry: push %s: %v", ref, err)
	}
	log.Printf("registry: serving %s as %s on %s", *archive, *repoTag, l.Addr())
	select {}
}
