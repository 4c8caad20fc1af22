package vm

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"
)

// TestInspectDiskRefusesNonRegular: a disk that is a FIFO (or a device,
// or a link) is refused at once, without blocking in open(2) on a FIFO no
// writer will ever open.
func TestInspectDiskRefusesNonRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "disk.qcow2")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.raw")
	symlink(t, "/etc/passwd", link)
	for _, c := range []struct{ path, want string }{
		{fifo, "image file /disk/disk.qcow2: a p---------, not a regular file"},
		{"/dev/null", "image file /disk/null: a Dc-rw-rw-rw-, not a regular file"},
	} {
		done := make(chan error, 1)
		go func() { _, err := inspectDisk(c.path, "qcow2"); done <- err }()
		select {
		case err := <-done:
			if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "not a regular file") {
				t.Errorf("inspectDisk(%s) = %v, want InvalidArgument %q", c.path, err, c.want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("inspectDisk(%s) blocked", c.path)
		}
	}
	if _, err := inspectDisk(link, "raw"); err == nil {
		t.Error("inspectDisk followed a symlink")
	}
}

// TestCreateOverlay: the overlay is a new regular file of the pod's QEMU
// uid and gid, mode 0600, that qemu-img checks clean, over exactly the
// image's disk; an existing file or a link in its place is an error that
// leaves it alone.
func TestCreateOverlay(t *testing.T) {
	dir := t.TempDir()
	disk := filepath.Join(dir, "rootfs", "disk", "disk.raw")
	sparse(t, disk, 3<<20+100) // a raw disk of a size qemu-img would round up
	overlay := filepath.Join(dir, "vm", "disk.qcow2")
	mkdirs(t, filepath.Dir(overlay))
	const uid, gid = 0x70000123, 0x70000123
	if err := createOverlay(disk, "raw", 3<<20+100, overlay, uid, gid); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(overlay)
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != uid || st.Gid != gid || fi.Mode() != 0o600 {
		t.Errorf("overlay %s, owned by %#x:%#x, want -rw------- of %#x:%#x", fi.Mode(), st.Uid, st.Gid, uid, gid)
	}
	if out, err := exec.Command("qemu-img", "check", "-U", overlay).CombinedOutput(); err != nil {
		t.Errorf("qemu-img check: %v: %s", err, out)
	}
	info, err := inspectDisk(overlay, "qcow2")
	if err == nil || !strings.Contains(err.Error(), "has a backing file (\""+disk+"\")") {
		t.Errorf("the overlay as an image: %v, %v; want its backing file named", info, err)
	}

	// Never over an existing file, nor through a link.
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "vm", "link.qcow2")
	symlink(t, target, link)
	for _, p := range []string{overlay, link} {
		if err := createOverlay(disk, "raw", 3<<20, p, uid, gid); !errdefs.IsInternal(err) {
			t.Errorf("createOverlay over %s = %v, want Internal", p, err)
		}
	}
	if b, err := os.ReadFile(target); err != nil || string(b) != "kept" {
		t.Errorf("the link's target: %q, %v", b, err)
	}
	if _, err := os.Lstat(overlay); err != nil {
		t.Errorf("the first overlay went with the failed second: %v", err)
	}
}
