// Command ociimage packages files from this machine as a one-layer OCI image
// and writes it as an OCI image-layout tar archive, for `ctr -n k8s.io images
// import` and `docker load`. The project's small images are made with it:
// the pause image (hack/pause), CoreDNS and the busybox client of the local
// cluster (hack/local/images.sh).
//
//	go run ./hack/ociimage -name localhost/vmpod/pause:v1 -o pause.oci.tar \
//	    -file _output/pause/pause=/pause -entrypoint /pause -user 65535:65535
//
// -file SRC=DST (repeatable) adds the regular file SRC at DST, 0755 when SRC
// is executable, else 0644; -link DST=TARGET adds a symlink. Parent
// directories are added as needed (0755). Everything is root-owned and every
// timestamp is fixed, so the same inputs always give the same digests.
package main

import (
	"archive/tar"
	"errors"
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

var epoch = time.Unix(0, 0).UTC()

// pairs is a repeatable A=B flag.
type pairs [][2]string

func (p *pairs) String() string { return fmt.Sprint(*p) }

func (p *pairs) Set(v string) error {
	a, b, ok := strings.Cut(v, "=")
	if !ok || a == "" || b == "" {
		return fmt.Errorf("%q: want A=B", v)
	}
	*p = append(*p, [2]string{a, b})
	return nil
}

// words is a repeatable flag, one word each.
type words []string

func (w *words) String() string     { return strings.Join(*w, " ") }
func (w *words) Set(v string) error { *w = append(*w, v); return nil }

type spec struct {
	name, out, user, workdir string
	files, links, env        pairs
	entrypoint, cmd          words
}

func main() {
	var s spec
	flag.StringVar(&s.name, "name", "", "image reference, e.g. localhost/vmpod/pause:v1")
	flag.StringVar(&s.out, "o", "", "output OCI image-layout tar archive")
	flag.StringVar(&s.user, "user", "", "the image's user (uid:gid)")
	flag.StringVar(&s.workdir, "workdir", "", "the image's working directory")
	flag.Var(&s.files, "file", "SRC=DST: add the regular file SRC at DST (repeatable)")
	flag.Var(&s.links, "link", "DST=TARGET: add a symlink DST -> TARGET (repeatable)")
	flag.Var(&s.env, "env", "NAME=VALUE: an environment variable of the image (repeatable)")
	flag.Var(&s.entrypoint, "entrypoint", "one word of the entrypoint (repeatable)")
	flag.Var(&s.cmd, "cmd", "one word of the default command (repeatable)")
	flag.Parse()
	if s.name == "" || s.out == "" || len(s.files) == 0 || flag.NArg() != 0 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(s); err != nil {
		fmt.Fprintln(os.Stderr, "ociimage:", err)
		os.Exit(1)
	}
}

func run(s spec) error {
	for _, f := range s.files {
		st, err := os.Stat(f[0])
		if err != nil {
			return err
		}
		if !st.Mode().IsRegular() {
			return fmt.Errorf("%s: not a regular file", f[0])
		}
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(writeLayer(pw, s.files, s.links)) }()
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
		History:   v1.History{Created: v1.Time{Time: epoch}, CreatedBy: "hack/ociimage"},
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
	cfg.Config.Entrypoint = s.entrypoint
	cfg.Config.Cmd = s.cmd
	cfg.Config.User = s.user
	cfg.Config.WorkingDir = s.workdir
	for _, e := range s.env {
		cfg.Config.Env = append(cfg.Config.Env, e[0]+"="+e[1])
	}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return err
	}
	return ociarchive.Write(s.out, img, s.name, epoch)
}

// writeLayer writes the files and links, each parent directory once before
// its first entry, in name order.
func writeLayer(w io.Writer, files, links pairs) error {
	type entry struct {
		dst, src, link string
	}
	var entries []entry
	for _, f := range files {
		entries = append(entries, entry{dst: clean(f[1]), src: f[0]})
	}
	for _, l := range links {
		entries = append(entries, entry{dst: clean(l[0]), link: l[1]})
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].dst < entries[j].dst })
	tw := tar.NewWriter(w)
	dirs := map[string]bool{".": true}
	var mkdirs func(dir string) error
	mkdirs = func(dir string) error {
		if dirs[dir] {
			return nil
		}
		if err := mkdirs(path.Dir(dir)); err != nil {
			return err
		}
		dirs[dir] = true
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir + "/", Mode: 0o755, ModTime: epoch, Format: tar.FormatPAX})
	}
	for i, e := range entries {
		if e.dst == "." || (i > 0 && entries[i-1].dst == e.dst) {
			return fmt.Errorf("%q: not a file path, or named twice", e.dst)
		}
		if err := mkdirs(path.Dir(e.dst)); err != nil {
			return err
		}
		if e.link != "" {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: e.dst, Linkname: e.link, Mode: 0o777, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
				return err
			}
			continue
		}
		if err := addFile(tw, e.src, e.dst); err != nil {
			return err
		}
	}
	return tw.Close()
}

func addFile(tw *tar.Writer, src, dst string) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	mode := int64(0o644)
	if st.Mode()&0o111 != 0 {
		mode = 0o755
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: dst, Mode: mode, Size: st.Size(), ModTime: epoch, Format: tar.FormatPAX}); err != nil {
		return err
	}
	n, err := io.Copy(tw, f)
	if err == nil && n != st.Size() {
		err = errors.New("changed while read")
	}
	if err != nil {
		return fmt.Errorf("%s: %w", src, err)
	}
	return nil
}

// clean makes an image path relative to the root ("/pause" -> "pause").
func clean(p string) string { return strings.TrimPrefix(path.Clean("/"+p), "/") }
