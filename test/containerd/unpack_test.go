package containerd_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/vmpod/vmpod/internal/testenv/containerd"
	"github.com/vmpod/vmpod/internal/testenv/hostiletar"
)

// TestContainerdUnpackIsUnbounded records what containerd's own unpack,
// which the shim path relies on (containerd unpacks, the shim only reads
// the rootfs), does with the layers vmpod's CRI server refuses (pkg/cri
// TestPullImageBounds, built by the same internal/testenv/hostiletar):
// each is imported with ctr, whose transfer service unpacks it for CRI's
// snapshotter (the walking differ, pkg/archive's Apply). containerd 2.4.2
// bounds none of them: a gzip of zeros and a PAX sparse entry land on disk
// at their full expanded size (the sparse one's holes written as zeros),
// thousands of entries and a deep path unpack; only an old GNU sparse
// entry is refused, as a tar type it does not handle. docs/security.md
// says so; if containerd changes, this test fails and the doc must
// change with it.
func TestContainerdUnpackIsUnbounded(t *testing.T) {
	c := containerd.Start(t, containerd.Options{})
	snapshots := filepath.Join(c.Root, "root", "io.containerd.snapshotter.v1."+c.Snapshotter)
	const size, files, depth = 64 << 20, 5000, 200
	for i, tc := range []struct {
		name    string
		layer   []byte
		refused string // in ctr's error; "": imported
		bytes   int64  // at least this much more on disk
		inodes  int64  // at least this many more
	}{
		{name: "a gzip of zeros", layer: hostiletar.Zeros("disk/zero.raw", size), bytes: size},
		{name: "a PAX sparse entry", layer: hostiletar.PAXSparse("disk/sparse.raw", size), bytes: size},
		{name: "an old GNU sparse entry", layer: hostiletar.GNUSparse("disk/sparse.raw", size), refused: "unhandled tar header type 83"},
		{name: "many files", layer: hostiletar.ManyFiles(files), inodes: files},
		{name: "a deep path", layer: hostiletar.Deep(depth), inodes: depth},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ref := fmt.Sprintf("localhost/vmpod/unbounded-%d:v1", i)
			archive := filepath.Join(t.TempDir(), "image.oci.tar")
			writeOCIImage(t, archive, ref, func() (io.ReadCloser, error) {
				return io.NopCloser(bytes.NewReader(tc.layer)), nil
			})
			bytes0, inodes0 := diskUse(t, snapshots)
			out, err := c.Ctr(t, "images", "import", "--snapshotter", c.Snapshotter, archive)
			bytes1, inodes1 := diskUse(t, snapshots)
			t.Logf("ctr images import: %v; the snapshots grew by %d bytes, %d inodes", err, bytes1-bytes0, inodes1-inodes0)
			if tc.refused != "" {
				if err == nil || !strings.Contains(out+err.Error(), tc.refused) {
					t.Errorf("import: %v\n%s\nwant it refused with %q", err, out, tc.refused)
				}
				return
			}
			if err != nil {
				t.Fatalf("import: %v\n%s", err, out)
			}
			if got := bytes1 - bytes0; got < tc.bytes {
				t.Errorf("the snapshots grew by %d bytes, want at least %d: containerd no longer writes it all", got, tc.bytes)
			}
			if got := inodes1 - inodes0; got < tc.inodes {
				t.Errorf("the snapshots grew by %d inodes, want at least %d", got, tc.inodes)
			}
		})
	}
}

// diskUse is what the tree at root takes on disk, in bytes (st_blocks)
// and inodes.
func diskUse(t *testing.T, root string) (bytes, inodes int64) {
	t.Helper()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // removed meanwhile (containerd's GC)
		}
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			bytes += st.Blocks * 512
		}
		inodes++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return bytes, inodes
}
