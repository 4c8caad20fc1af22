package vmd

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"

	"github.com/vmpod/vmpod/internal/testenv/fullfs"
)

// TestCreateOnFullStateRoot: a VM made while the state root is full fails
// with ResourceExhausted naming the root, and leaves no record of it:
// no checkpoint, and the node does not know the VM.
func TestCreateOnFullStateRoot(t *testing.T) {
	root := fullfs.Mount(t, 256<<10)
	cfg := Config{StateRoot: root}.WithDefaults()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	fullfs.Fill(t, root)

	err = s.Create(context.Background(), CreateRequest{ID: "vm1", PodID: "p1"})
	if !errdefs.IsResourceExhausted(err) || !strings.Contains(err.Error(), root) || !strings.Contains(err.Error(), "bytes free") {
		t.Fatalf("Create on a full state root: %v; want ResourceExhausted naming %s and its free bytes", err, root)
	}
	t.Logf("Create on a full state root: %v", err)
	if _, err := os.Stat(cfg.checkpoint("vm1")); !os.IsNotExist(err) {
		t.Errorf("a checkpoint of the failed VM is left: %v", err)
	}
	if _, err := s.Get("vm1"); !errdefs.IsNotFound(err) {
		t.Errorf("the node knows the failed VM: %v", err)
	}
	left, _ := filepath.Glob(filepath.Join(cfg.checkpointDir(), "*"))
	if len(left) != 0 {
		t.Errorf("files left in the checkpoint dir: %v", left)
	}
}
