// Package checkpointimage makes a checkpoint image: a VM's checkpoint, as
// the kubelet's checkpoint API had a vmpod node write it, put into the
// containerdisk the VM ran from. A pod whose image is a checkpoint image
// starts its VM where the checkpointed one was (vm.Image.State), on any
// node that trusts the key that signed the checkpoint, instead of booting
// it. containerd and the kubelet see an ordinary image and pod; containerd
// itself cannot restore from a checkpoint archive.
//
// It may import pkg/vm (the checkpoint's file names), go-containerregistry
// and the standard library.
package checkpointimage

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/vmpod/vmpod/pkg/vm"
)

// stateFiles are the files of a checkpoint, under checkpoint/ in a
// checkpoint archive (the layout containerd and CRI-O write).
var stateFiles = map[string]bool{
	vm.CheckpointState: true, vm.CheckpointDisk: true, vm.CheckpointManifest: true, vm.CheckpointSignature: true,
}

// Build returns base with one more layer that holds the checkpoint of the
// archive at archive under vm.ImageStateDir, and the layer's file in tmpDir,
// which must outlive the image (its content is read from there). base
// must be the containerdisk the checkpointed VM ran from: a restore
// checks its disk against the checkpoint's. The archive is the one the
// kubelet's checkpoint API wrote; only its checkpoint/ files are taken.
func Build(base v1.Image, archive, tmpDir string, mtime time.Time) (v1.Image, error) {
	in, err := os.Open(archive)
	if err != nil {
		return nil, err
	}
	defer in.Close()
	layer, err := os.CreateTemp(tmpDir, "checkpoint-layer-*.tar")
	if err != nil {
		return nil, err
	}
	defer layer.Close()
	if err := stateLayer(in, layer, mtime); err != nil {
		return nil, fmt.Errorf("checkpoint archive %s: %w", archive, err)
	}
	if err := layer.Close(); err != nil {
		return nil, err
	}
	l, err := tarball.LayerFromFile(layer.Name())
	if err != nil {
		return nil, err
	}
	return mutate.AppendLayers(base, l)
}

// stateLayer writes the layer tar: the archive's checkpoint files under
// vm.ImageStateDir, world-readable, as every containerdisk file is.
func stateLayer(archive io.Reader, out io.Writer, mtime time.Time) error {
	tw := tar.NewWriter(out)
	for _, d := range []string{"vmpod/", vm.ImageStateDir + "/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755, ModTime: mtime}); err != nil {
			return err
		}
	}
	found := map[string]bool{}
	tr := tar.NewReader(archive)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		name := path.Clean(strings.TrimPrefix(h.Name, "./"))
		dir, file := path.Split(name)
		if dir != "checkpoint/" || h.Typeflag == tar.TypeDir {
			continue
		}
		if !stateFiles[file] || h.Typeflag != tar.TypeReg {
			return fmt.Errorf("%s: not a file of a vmpod checkpoint (is this a VM pod's checkpoint?)", name)
		}
		if found[file] {
			return fmt.Errorf("%s is in the archive twice", name)
		}
		found[file] = true
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: vm.ImageStateDir + "/" + file, Mode: 0o444,
			Size: h.Size, ModTime: mtime}); err != nil {
			return err
		}
		if _, err := io.CopyN(tw, tr, h.Size); err != nil {
			return err
		}
	}
	for _, f := range []string{vm.CheckpointState, vm.CheckpointManifest} {
		if !found[f] {
			return fmt.Errorf("no checkpoint/%s: not a VM pod's checkpoint", f)
		}
	}
	return tw.Close()
}
