// Command image packages the static pause binary as a one-layer OCI image and
// writes it as an OCI image-layout tar archive for `ctr -n k8s.io images import`.
//
//	go run ./hack/pause/image -bin _output/pause/pause -name localhost/vmpod/pause:v1 -o pause.oci.tar
//
// The layer holds only /pause (0755, root-owned); the image runs it as
// 65535:65535, as the upstream pause image does. Every timestamp is fixed, so
// the same binary always gives the same digests.
package main

import (
	"archive/tar"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/vmpod/vmpod/internal/ociarchive"
)

var epoch = time.Unix(0, 0).UTC()

func main() {
	bin := flag.String("bin", "", "the static pause binary")
	name := flag.String("name", "", "image reference, e.g. localhost/vmpod/pause:v1")
	out := flag.String("o", "", "output OCI image-layout tar archive")
	flag.Parse()
	if *bin == "" || *name == "" || *out == "" || flag.NArg() != 0 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*bin, *name, *out); err != nil {
		fmt.Fprintln(os.Stderr, "pause/image:", err)
		os.Exit(1)
	}
}

func run(bin, name, out string) error {
	st, err := os.Stat(bin)
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s: not a regular file", bin)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(writeLayer(pw, bin)) }()
		return pr, nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
	if err != nil {
		return fmt.Errorf("layer: %w", err)
	}

	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History:   v1.History{Created: v1.Time{Time: epoch}, CreatedBy: "hack/pause/build.sh"},
	})
	if err != nil {
		return err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cfg = cfg.DeepCopy()
	cfg.OS = "linux"
	cfg.Architecture = "amd64"
	cfg.Created = v1.Time{Time: epoch}
	cfg.Config.Entrypoint = []string{"/pause"}
	cfg.Config.User = "65535:65535"
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return err
	}

	return ociarchive.Write(out, img, name, epoch)
}

func writeLayer(w io.Writer, bin string) error {
	src, err := os.Open(bin)
	if err != nil {
		return err
	}
	defer src.Close()
	st, err := src.Stat()
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	if err := tw.WriteHeader(&tar.Header{
		Typeflag: tar.TypeReg, Name: "pause", Mode: 0o755, Size: st.Size(),
		ModTime: epoch, Format: tar.FormatPAX,
	}); err != nil {
		return err
	}
	if _, err := io.Copy(tw, src); err != nil {
		return err
	}
	return tw.Close()
}
