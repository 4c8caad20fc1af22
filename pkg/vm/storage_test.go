package vm_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/vmpod/vmpod/internal/testenv/fullfs"
	"github.com/vmpod/vmpod/pkg/vm"
)

// TestStorageError: a write the node's state dir refuses (full,
// read-only), as an errno or as libvirt's and qemu-img's text, becomes
// ResourceExhausted (FailedPrecondition when read-only) naming the dir
// and its free bytes; other errors stay as they were.
func TestStorageError(t *testing.T) {
	dir := fullfs.Mount(t, 64<<10)
	fullfs.Fill(t, dir)
	werr := os.WriteFile(filepath.Join(dir, "more"), make([]byte, 8192), 0o600)
	if !errors.Is(werr, unix.ENOSPC) {
		t.Fatalf("a write on the full file system: %v, want ENOSPC", werr)
	}
	for _, err := range []error{
		fmt.Errorf("checkpoint: %w", werr),
		fmt.Errorf("qemu-img: %s/disk.qcow2: Could not write qcow2 header: No space left on device: %w", dir, errdefs.ErrInternal),
	} {
		got := vm.StorageError(err, dir)
		if !errdefs.IsResourceExhausted(got) || errdefs.IsInternal(got) {
			t.Errorf("%v: %v, want ResourceExhausted alone", err, got)
		}
		if !strings.Contains(got.Error(), dir) || !strings.Contains(got.Error(), "ENOSPC") || !strings.Contains(got.Error(), "bytes free of 65536") {
			t.Errorf("%q does not name the dir, ENOSPC and its free bytes", got)
		}
	}
	if err := unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		t.Fatal(err)
	}
	_, rerr := os.Create(filepath.Join(dir, "ro"))
	if got := vm.StorageError(rerr, dir); !errdefs.IsFailedPrecondition(got) || !strings.Contains(got.Error(), "read-only") {
		t.Errorf("a write on a read-only state dir: %v, want FailedPrecondition saying read-only", got)
	}
	other := fmt.Errorf("no such domain: %w", errdefs.ErrNotFound)
	if got := vm.StorageError(other, dir); got != other {
		t.Errorf("an unrelated error became %v", got)
	}
	if vm.StorageError(nil, dir) != nil {
		t.Error("nil became an error")
	}
}
