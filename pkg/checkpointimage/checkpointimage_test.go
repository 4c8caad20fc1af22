package checkpointimage_test

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/vmpod/vmpod/pkg/checkpointimage"
	"github.com/vmpod/vmpod/pkg/vm"
)

// writeTar writes an archive of the named files (a trailing / makes a dir).
func writeTar(t *testing.T, files map[string]string, order []string) string {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, name := range order {
		h := &tar.Header{Name: name, Mode: 0o600, Size: int64(len(files[name])), Typeflag: tar.TypeReg}
		if strings.HasSuffix(name, "/") {
			h.Typeflag, h.Size, h.Mode = tar.TypeDir, 0, 0o700
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, files[name]); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "checkpoint.tar")
	if err := os.WriteFile(p, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// The image gets one layer: the archive's checkpoint files under
// vmpod/state, world-readable; containerd's dumps stay out.
func TestBuild(t *testing.T) {
	files := map[string]string{
		"checkpoint/":                          "",
		"checkpoint/" + vm.CheckpointState:     "state",
		"checkpoint/" + vm.CheckpointDisk:      "disk",
		"checkpoint/" + vm.CheckpointManifest:  `{"machine":"pc-q35-7.2"}`,
		"checkpoint/" + vm.CheckpointSignature: "sig",
		"config.dump":                          "{}",
		"rootfs-diff.tar":                      "",
	}
	order := []string{"config.dump", "checkpoint/", "checkpoint/" + vm.CheckpointState, "checkpoint/" + vm.CheckpointDisk,
		"checkpoint/" + vm.CheckpointManifest, "checkpoint/" + vm.CheckpointSignature, "rootfs-diff.tar"}
	img, err := checkpointimage.Build(empty.Image, writeTar(t, files, order), t.TempDir(), time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers %d, %v; want one on the empty base", len(layers), err)
	}
	// Labelled with the machine type the VM ran on, for its pods'
	// vmpod.io/machine annotation.
	if m, err := checkpointimage.Machine(img); err != nil || m != "pc-q35-7.2" {
		t.Errorf("the image's machine: %q, %v; want pc-q35-7.2", m, err)
	}
	if cf, err := img.ConfigFile(); err != nil || cf.Config.Labels["vmpod.io/machine"] != "pc-q35-7.2" {
		t.Errorf("the image's labels: %+v, %v", cf, err)
	}
	rc := mutate.Extract(img)
	defer rc.Close()
	got := map[string]string{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		got[h.Name] = string(b)
		if h.Typeflag == tar.TypeReg && h.Mode != 0o444 {
			t.Errorf("%s has mode %o, want 0444", h.Name, h.Mode)
		}
	}
	for _, f := range []string{vm.CheckpointState, vm.CheckpointDisk, vm.CheckpointManifest, vm.CheckpointSignature} {
		if got[vm.ImageStateDir+"/"+f] != files["checkpoint/"+f] {
			t.Errorf("%s/%s = %q, want %q", vm.ImageStateDir, f, got[vm.ImageStateDir+"/"+f], files["checkpoint/"+f])
		}
	}
	for name := range got {
		if name != "vmpod" && !strings.HasPrefix(name, "vmpod/") {
			t.Errorf("the layer holds %s, outside vmpod/", name)
		}
	}
}

// What is not a VM pod's checkpoint archive is refused, naming why.
func TestBuildRefuses(t *testing.T) {
	for _, c := range []struct {
		name  string
		files map[string]string
		order []string
		want  string
	}{
		{"a container's (CRIU's) checkpoint", map[string]string{"checkpoint/pages-1.img": "x", "config.dump": "{}"},
			[]string{"config.dump", "checkpoint/pages-1.img"}, "not a file of a vmpod checkpoint"},
		{"no state", map[string]string{"checkpoint/" + vm.CheckpointManifest: "{}"},
			[]string{"checkpoint/" + vm.CheckpointManifest}, "no checkpoint/vm.state"},
		{"a file twice", map[string]string{"checkpoint/" + vm.CheckpointState: "a"},
			[]string{"checkpoint/" + vm.CheckpointState, "checkpoint/" + vm.CheckpointState}, "twice"},
	} {
		_, err := checkpointimage.Build(empty.Image, writeTar(t, c.files, c.order), t.TempDir(), time.Unix(0, 0))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want it refused saying %q", c.name, err, c.want)
		}
	}
}
