package vmd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"
)

// TestCreateOnFullStateRoot: a VM made while the state root is full fails
// with ResourceExhausted naming the root, and leaves no record of it:
// no checkpoint, and the node does not know the VM.
func TestCreateOnFullStateRoot(t *testing.T) {
	root := t.TempDir()
	if err := unix.Mount("tmpfs", root, "tmpfs", 0, fmt.Sprintf("size=%d", 256<<10)); err != nil {
		t.Fatalf("tmpfs on %s (the test needs root): %v", root, err)
	}
	t.Cleanup(func() { unix.Unmount(root, unix.MNT_DETACH) })
	cfg := Config{StateRoot: root}.WithDefaults()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(root, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	for buf := make([]byte, 4096); ; {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, unix.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	f.Close()

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
