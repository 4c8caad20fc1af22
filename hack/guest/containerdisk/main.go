// Command containerdisk packages files into a one-layer OCI image (KubeVirt's
// containerdisk layout) and writes it as an OCI image-layout tar archive that
// `ctr -n k8s.io images import` accepts.
//
//	go run ./hack/guest/containerdisk -o out.tar -name localhost/vmpod/test-guest:v1 \
//	    -file /boot/vmlinuz=_output/guest/vmlinuz -file /disk/disk.qcow2=_output/guest/disk.qcow2
package main

import (
	"archive/tar"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/vmpod/vmpod/internal/ociarchive"
)

// Files in the layer are owned by uid/gid 107 with mode 0444, as in KubeVirt's
// containerdisk documentation (107 is the qemu user in KubeVirt's launcher), so
// this image is interchangeable with any KubeVirt containerdisk. Mode 0444 makes
// the owner irrelevant for reading, and nothing ever writes to these files: the
// runtime puts a qcow2 overlay on top of /disk/*.qcow2. Directories are plain
// root-owned 0755, as a Dockerfile ADD creates them.
const (
	fileOwner = 107
	fileMode  = 0o444
	dirMode   = 0o755
)

// epoch is the fixed timestamp of every tar entry and of the image config, so
// the same inputs always give the same digests.
var epoch = time.Unix(0, 0).UTC()

type fileFlag []mapping

type mapping struct{ dst, src string }

func (f *fileFlag) String() string { return fmt.Sprint(*f) }

func (f *fileFlag) Set(v string) error {
	dst, src, ok := strings.Cut(v, "=")
	if !ok || !strings.HasPrefix(dst, "/") || src == "" {
		return fmt.Errorf("want /path/in/image=local/path, got %q", v)
	}
	dst = path.Clean(dst)
	if dst == "/" {
		return fmt.Errorf("%q: destination must be a file", v)
	}
	*f = append(*f, mapping{dst: dst, src: src})
	return nil
}

func main() {
	out := flag.String("o", "", "output OCI image-layout tar archive")
	name := flag.String("name", "", "image reference, e.g. localhost/vmpod/test-guest:v1")
	var files fileFlag
	flag.Var(&files, "file", "/path/in/image=local/path (repeatable)")
	flag.Parse()
	if *out == "" || *name == "" || len(files) == 0 || flag.NArg() != 0 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*out, *name, files); err != nil {
		fmt.Fprintln(os.Stderr, "containerdisk:", err)
		os.Exit(1)
	}
}

func run(out, name string, files []mapping) error {
	sort.Slice(files, func(i, j int) bool { return files[i].dst < files[j].dst })
	for i := 1; i < len(files); i++ {
		if files[i].dst == files[i-1].dst {
			return fmt.Errorf("%s given twice", files[i].dst)
		}
	}
	for _, f := range files {
		if st, err := os.Stat(f.src); err != nil {
			return err
		} else if !st.Mode().IsRegular() {
			return fmt.Errorf("%s: not a regular file", f.src)
		}
	}

	// The opener is called several times (digest, diff ID, write); it
	// regenerates the same tar stream each time instead of buffering it.
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(writeLayer(pw, files)) }()
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
		History:   v1.History{Created: v1.Time{Time: epoch}, CreatedBy: "hack/guest/containerdisk"},
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
	// containerd's CRI refuses to create a container whose image and pod
	// name no command. vmpod never runs it (the VM boots from /boot or
	// /disk), so it only has to be there; see docs/containerdisk.md.
	cfg.Config.Cmd = []string{"containerdisk"}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return err
	}

	return ociarchive.Write(out, img, name, epoch)
}

// writeLayer writes the image's file system: parent directories first, then
// each file, all with fixed owner, modes and times.
func writeLayer(w io.Writer, files []mapping) error {
	tw := tar.NewWriter(w)
	seen := map[string]bool{}
	for _, f := range files {
		var parents []string
		for d := path.Dir(f.dst); d != "/" && !seen[d]; d = path.Dir(d) {
			seen[d] = true
			parents = append([]string{d}, parents...)
		}
		for _, d := range parents {
			if err := tw.WriteHeader(header(d[1:]+"/", tar.TypeDir, dirMode, 0, 0)); err != nil {
				return err
			}
		}
		src, err := os.Open(f.src)
		if err != nil {
			return err
		}
		st, err := src.Stat()
		if err == nil {
			err = tw.WriteHeader(header(f.dst[1:], tar.TypeReg, fileMode, fileOwner, st.Size()))
		}
		if err == nil {
			_, err = io.Copy(tw, src)
		}
		src.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", f.src, err)
		}
	}
	return tw.Close()
}

func header(name string, typ byte, mode int64, owner int, size int64) *tar.Header {
	return &tar.Header{
		Typeflag: typ, Name: name, Mode: mode, Size: size,
		Uid: owner, Gid: owner, ModTime: epoch, Format: tar.FormatPAX,
	}
}
