package vm

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"
)

// hostile is a containerdisk a pod author built to reach the host, and what
// its refusal must say.
type hostile struct {
	name  string
	build func(t *testing.T, root, host string)
	want  string // in the error, which must be InvalidArgument
}

func qemuImg(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("qemu-img", args...).CombinedOutput(); err != nil {
		t.Fatalf("qemu-img %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// sparse makes a world-readable file of size bytes that takes no disk.
func sparse(t *testing.T, path string, size int64) {
	t.Helper()
	mkdirs(t, filepath.Dir(path))
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
}

func mkdirs(t *testing.T, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// hostileImages is the set of the issue "Untrusted pods": each one is
// refused with an error that names the file and the problem.
var hostileImages = []hostile{
	{"backing file to a host file", func(t *testing.T, root, host string) {
		qemuImg(t, "create", "-q", "-f", "qcow2", "-u", "-F", "raw", "-b", filepath.Join(host, "secret"), filepath.Join(root, "disk", "disk.qcow2"), "1M")
	}, `image file /disk/disk.qcow2: has a backing file`},
	{"backing file to a host block device", func(t *testing.T, root, host string) {
		qemuImg(t, "create", "-q", "-f", "qcow2", "-u", "-F", "raw", "-b", "/dev/sda", filepath.Join(root, "disk", "disk.qcow2"), "1M")
	}, `has a backing file ("/dev/sda")`},
	{"external data file", func(t *testing.T, root, host string) {
		qemuImg(t, "create", "-q", "-f", "qcow2", "-o", "data_file="+filepath.Join(host, "secret")+",data_file_raw=on", filepath.Join(root, "disk", "disk.qcow2"), "1M")
	}, `has an external data file ("/`},
	{"/disk a symlink to a host directory", func(t *testing.T, root, host string) {
		os.Remove(filepath.Join(root, "disk"))
		symlink(t, host, filepath.Join(root, "disk"))
	}, `image file /disk: a symlink is on its path`},
	{"/disk a relative symlink out of the image", func(t *testing.T, root, host string) {
		os.Remove(filepath.Join(root, "disk"))
		rel, _ := filepath.Rel(root, host)
		symlink(t, rel, filepath.Join(root, "disk"))
	}, `image file /disk: a symlink is on its path`},
	{"/boot a symlink to a host directory", func(t *testing.T, root, host string) {
		symlink(t, host, filepath.Join(root, "boot"))
	}, `image file /boot/vmlinux: a symlink is on its path`},
	{"the disk a symlink to a host file", func(t *testing.T, root, host string) {
		symlink(t, filepath.Join(host, "secret.raw"), filepath.Join(root, "disk", "disk.raw"))
	}, `image file /disk/disk.raw: a symlink, not a regular file`},
	{"raw content named .qcow2", func(t *testing.T, root, host string) {
		qemuImg(t, "create", "-q", "-f", "raw", filepath.Join(root, "disk", "disk.qcow2"), "1M")
	}, `image file /disk/disk.qcow2: named .qcow2 but not qcow2`},
	{"qcow2 content named .raw", func(t *testing.T, root, host string) {
		qemuImg(t, "create", "-q", "-f", "qcow2", filepath.Join(root, "disk", "disk.raw"), "1M")
	}, `image file /disk/disk.raw: qcow2 content under a raw disk's name`},
	{"qcow2 content named .img", func(t *testing.T, root, host string) {
		qemuImg(t, "create", "-q", "-f", "qcow2", filepath.Join(root, "disk", "disk.img"), "1M")
	}, `image file /disk/disk.img: qcow2 content under a raw disk's name`},
	{"a huge kernel", func(t *testing.T, root, host string) {
		sparse(t, filepath.Join(root, "boot", "vmlinux"), MaxKernelBytes+1)
	}, `image file /boot/vmlinux: 268435457 bytes, above the 256 MiB`},
	{"a huge initrd", func(t *testing.T, root, host string) {
		sparse(t, filepath.Join(root, "boot", "vmlinuz"), 1<<20)
		sparse(t, filepath.Join(root, "boot", "initrd.img"), 3<<30)
	}, `image file /boot/initrd.img: 3221225472 bytes, above the 1024 MiB`},
	{"a qcow2 cut short (its tables past the file's end)", func(t *testing.T, root, host string) {
		disk := filepath.Join(root, "disk", "disk.qcow2")
		qemuImg(t, "create", "-q", "-f", "qcow2", disk, "1M")
		if err := os.Truncate(disk, 0x18000); err != nil {
			t.Fatal(err)
		}
	}, `image file /disk/disk.qcow2: qcow2 header: refcount_table_offset 0x10000 with refcount_table_clusters 1: the table (65536 bytes) ends past the file`},
	{"a huge virtual size", func(t *testing.T, root, host string) {
		qemuImg(t, "create", "-q", "-f", "qcow2", filepath.Join(root, "disk", "disk.qcow2"), "64T")
	}, `virtual size 65536 GiB is above the maximum of 4096 GiB`},
}

// intake is what the runtime does with an image before QEMU sees it:
// FindImage, then inspectDisk.
func intake(root string) (Image, diskInfo, error) {
	img, err := FindImage(root)
	if err != nil || img.Disk == "" {
		return img, diskInfo{}, err
	}
	info, err := inspectDisk(img.Disk, img.DiskFormat)
	return img, info, err
}

// TestHostileImages: every hostile containerdisk is refused with an
// InvalidArgument naming the file and the problem, and nothing opens the
// host file it points at (inotify on it sees no open).
func TestHostileImages(t *testing.T) {
	for _, h := range hostileImages {
		t.Run(h.name, func(t *testing.T) {
			dir := t.TempDir()
			root, host := filepath.Join(dir, "rootfs"), filepath.Join(dir, "host")
			mkdirs(t, filepath.Join(root, "disk"), host)
			for _, f := range []string{"secret", "secret.raw", "vmlinux"} {
				if err := os.WriteFile(filepath.Join(host, f), []byte("host data"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			h.build(t, root, host)
			opened := watchOpens(t, host)
			_, _, err := intake(root)
			if err == nil || !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), h.want) {
				t.Fatalf("intake: %v; want InvalidArgument containing %q", err, h.want)
			}
			if n := opened(); n != "" {
				t.Errorf("the intake opened the host's %s", n)
			}
		})
	}
}

// TestImageIntakeAccepts: clean disks of each format pass, whatever their
// name holds (a comma once added options to qemu-img's), and the overlay's
// backing file is exactly the image's disk.
func TestImageIntakeAccepts(t *testing.T) {
	for _, c := range []struct{ file, format string }{
		{"disk.qcow2", "qcow2"}, {"disk.raw", "raw"}, {"a,backing_file=x.img", "raw"},
	} {
		t.Run(c.file, func(t *testing.T) {
			dir := t.TempDir()
			root := filepath.Join(dir, "rootfs")
			mkdirs(t, filepath.Join(root, "disk"), filepath.Join(root, "boot"))
			qemuImg(t, "create", "-q", "-f", c.format, filepath.Join(root, "disk", c.file), "3M")
			if err := os.WriteFile(filepath.Join(root, "boot", "vmlinux"), []byte("k"), 0o644); err != nil {
				t.Fatal(err)
			}
			img, info, err := intake(root)
			if err != nil {
				t.Fatal(err)
			}
			if img.DiskFormat != c.format || info.VirtualSize != 3<<20 || img.Kernel != filepath.Join(root, "boot", "vmlinux") {
				t.Fatalf("intake = %+v, %+v", img, info)
			}
			overlay := filepath.Join(dir, "overlay.qcow2")
			if err := createOverlay(img.Disk, img.DiskFormat, info.VirtualSize, overlay, 0, 0); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command("qemu-img", "info", "--output=json", "-U", overlay).Output()
			if err != nil {
				t.Fatal(err)
			}
			var got struct {
				Backing string `json:"backing-filename"`
				Format  string `json:"backing-filename-format"`
				Size    uint64 `json:"virtual-size"`
			}
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatal(err)
			}
			if got.Backing != img.Disk || got.Format != c.format || got.Size != 3<<20 {
				t.Errorf("overlay backing %q (%s, %d bytes), want %q (%s, %d)", got.Backing, got.Format, got.Size, img.Disk, c.format, 3<<20)
			}
		})
	}
}

// watchOpens reports, when called, the first file in dir that something
// opened since watchOpens returned ("" for none).
func watchOpens(t *testing.T, dir string) func() string {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_OPEN); err != nil {
		t.Fatal(err)
	}
	return func() string {
		time.Sleep(50 * time.Millisecond)
		buf := make([]byte, 4096)
		n, err := unix.Read(fd, buf)
		if err != nil || n < unix.SizeofInotifyEvent {
			return ""
		}
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[0]))
		name := strings.TrimRight(string(buf[unix.SizeofInotifyEvent:unix.SizeofInotifyEvent+int(ev.Len)]), "\x00")
		if name == "" {
			name = dir
		}
		return name
	}
}

// BenchmarkImageIntake is what the image checks add to a VM's start: the
// openat2 walk of the image root and the read of the disk's qcow2 header
// (make bench), on a 20 GiB qcow2 with a kernel and an initrd.
func BenchmarkImageIntake(b *testing.B) {
	root := b.TempDir()
	for _, d := range []string{"disk", "boot"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			b.Fatal(err)
		}
	}
	for _, f := range []string{"boot/vmlinux", "boot/initrd.img"} {
		if err := os.WriteFile(filepath.Join(root, f), []byte("x"), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", filepath.Join(root, "disk", "disk.qcow2"), "20G").CombinedOutput(); err != nil {
		b.Fatalf("%v: %s", err, out)
	}
	if err := os.Chmod(filepath.Join(root, "disk", "disk.qcow2"), 0o644); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, _, err := intake(root); err != nil {
			b.Fatal(err)
		}
	}
}
