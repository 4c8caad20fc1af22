// Package checkpointimage makes a checkpoint image: a VM's checkpoint, as
// the kubelet's checkpoint API had a vmpod node write it, put into the
// containerdisk the VM ran from. A pod whose image is a checkpoint image
// starts its VM where the checkpointed one was (vm.Image.State), on any
// node that trusts the key that signed the checkpoint, instead of booting
// it. containerd and the kubelet see an ordinary image and pod; containerd
// itself cannot restore from a checkpoint archive.
//
// It may import pkg/vm (the checkpoint's file names), pkg/vmspec (the
// machine annotation it labels the image with), go-containerregistry and
// the standard library.
package checkpointimage

import (
	"archive/tar"
	"bytes"
	"encoding/json"
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
	"github.com/vmpod/vmpod/pkg/vmspec"
)

// maxManifest bounds the manifest Build reads into memory.
const maxManifest = 1 << 20

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
	manifest, err := stateLayer(in, layer, mtime)
	if err != nil {
		return nil, fmt.Errorf("checkpoint archive %s: %w", archive, err)
	}
	if err := layer.Close(); err != nil {
		return nil, err
	}
	l, err := tarball.LayerFromFile(layer.Name())
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(base, l)
	if err != nil {
		return nil, err
	}
	return withMachineLabel(img, manifest)
}

// withMachineLabel labels img with the machine type its checkpoint's VM
// ran on (vmspec.AnnotationMachine, the manifest's machine), which is what
// a pod of it must run on (Machine reads it back). A manifest that names
// none (an older one) adds no label; the restore checks the manifest in
// full.
func withMachineLabel(img v1.Image, manifest []byte) (v1.Image, error) {
	var m struct {
		Machine string `json:"machine"`
	}
	if err := json.Unmarshal(manifest, &m); err != nil {
		return nil, fmt.Errorf("%s: %v", vm.CheckpointManifest, err)
	}
	if m.Machine == "" {
		return img, nil
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg := cf.Config
	labels := map[string]string{}
	for k, v := range cfg.Labels {
		labels[k] = v
	}
	labels[vmspec.AnnotationMachine] = m.Machine
	cfg.Labels = labels
	return mutate.Config(img, cfg)
}

// Machine is the machine type a checkpoint image's VM ran on (Build's
// label), "" when it does not say. A pod of the image should carry it
// as its vmpod.io/machine annotation: the scheduler plugin then places it
// on a node whose QEMU offers that type, and only there can it restore.
func Machine(img v1.Image) (string, error) {
	cf, err := img.ConfigFile()
	if err != nil {
		return "", err
	}
	return cf.Config.Labels[vmspec.AnnotationMachine], nil
}

// stateLayer writes the layer tar: the archive's checkpoint files under
// vm.ImageStateDir, world-readable, as every containerdisk file is.
// It returns the manifest.
func stateLayer(archive io.Reader, out io.Writer, mtime time.Time) ([]byte, error) {
	tw := tar.NewWriter(out)
	for _, d := range []string{"vmpod/", vm.ImageStateDir + "/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755, ModTime: mtime}); err != nil {
			return nil, err
		}
	}
	found := map[string]bool{}
	var manifest bytes.Buffer
	tr := tar.NewReader(archive)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		name := path.Clean(strings.TrimPrefix(h.Name, "./"))
		dir, file := path.Split(name)
		if dir != "checkpoint/" || h.Typeflag == tar.TypeDir {
			continue
		}
		if !stateFiles[file] || h.Typeflag != tar.TypeReg {
			return nil, fmt.Errorf("%s: not a file of a vmpod checkpoint (is this a VM pod's checkpoint?)", name)
		}
		if found[file] {
			return nil, fmt.Errorf("%s is in the archive twice", name)
		}
		found[file] = true
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: vm.ImageStateDir + "/" + file, Mode: 0o444,
			Size: h.Size, ModTime: mtime}); err != nil {
			return nil, err
		}
		var w io.Writer = tw
		if file == vm.CheckpointManifest {
			if h.Size > maxManifest {
				return nil, fmt.Errorf("%s: %d bytes, more than a manifest's %d", name, h.Size, maxManifest)
			}
			w = io.MultiWriter(tw, &manifest)
		}
		if _, err := io.CopyN(w, tr, h.Size); err != nil {
			return nil, err
		}
	}
	for _, f := range []string{vm.CheckpointState, vm.CheckpointManifest} {
		if !found[f] {
			return nil, fmt.Errorf("no checkpoint/%s: not a VM pod's checkpoint", f)
		}
	}
	return manifest.Bytes(), tw.Close()
}
