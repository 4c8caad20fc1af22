package vm

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"
)

// Image is what a containerdisk ships, as host paths inside its unpacked
// root filesystem (KubeVirt's layout: /disk/<name>.qcow2|.raw|.img, plus
// /boot/ for direct kernel boot).
type Image struct {
	// Kernel is /boot/vmlinux (an uncompressed ELF kernel QEMU enters
	// directly: seconds faster under TCG) or else /boot/vmlinuz; "" if neither.
	Kernel string
	// Initrd is /boot/initrd.img; "" if absent.
	Initrd string
	// Disk is the one file under /disk/; "" if none.
	Disk string
	// DiskFormat is "qcow2" or "raw", from the file name.
	DiskFormat string
	// DiskSize is the disk's virtual size once InspectImage checked it; 0
	// before.
	DiskSize uint64
	// State is /vmpod/state when the image carries a checkpoint of a VM
	// there (a checkpoint image: vm-runtime checkpoint-image), which the
	// VM starts from instead of booting, if a key the node trusts signed
	// it; "" for none.
	State string
}

// ImageStateDir is where a checkpoint image carries its checkpoint's
// files (pkg/checkpointimage), below the image root.
const ImageStateDir = "vmpod/state"

const stateManifest = ImageStateDir + "/" + CheckpointManifest

// InspectImage is FindImage, then the check of the disk's content
// (inspectDisk): everything the runtime refuses in an image, before a VM
// is made for it.
func InspectImage(rootfs string) (Image, error) {
	img, err := FindImage(rootfs)
	if err != nil || img.Disk == "" {
		return img, err
	}
	info, err := inspectDisk(img.Disk, img.DiskFormat)
	if err != nil {
		return Image{}, err
	}
	img.DiskSize = info.VirtualSize
	return img, nil
}

var diskFormats = map[string]string{".qcow2": "qcow2", ".raw": "raw", ".img": "raw"}

// FindImage looks into a containerdisk's root filesystem, which the pod
// author made. Every path is resolved beneath rootfs with openat2 and no
// symlink may take part, not even one that stays inside the image: a
// symlinked /disk or /boot (absolute or ../..) would otherwise resolve in
// the host's mount namespace and show the VM a host file. Only regular
// files count. A refusal is InvalidArgument naming the file.
func FindImage(rootfs string) (Image, error) {
	root, err := os.Open(rootfs)
	if err != nil {
		return Image{}, fmt.Errorf("image root %s: %v: %w", rootfs, err, errdefs.ErrInternal)
	}
	defer root.Close()

	var img Image
	for _, k := range []string{"boot/vmlinux", "boot/vmlinuz"} {
		if ok, err := regularFile(root, k); err != nil {
			return Image{}, err
		} else if ok {
			img.Kernel = filepath.Join(rootfs, k)
			break
		}
	}
	if ok, err := regularFile(root, "boot/initrd.img"); err != nil {
		return Image{}, err
	} else if ok {
		img.Initrd = filepath.Join(rootfs, "boot/initrd.img")
	}

	disks, err := diskFiles(root)
	if err != nil {
		return Image{}, err
	}
	switch len(disks) {
	case 0:
	case 1:
		img.Disk = filepath.Join(rootfs, "disk", disks[0])
		img.DiskFormat = diskFormats[filepath.Ext(disks[0])]
	default:
		return Image{}, fmt.Errorf("containerdisk has %d disks under /disk/ (%v), want one: %w",
			len(disks), disks, errdefs.ErrInvalidArgument)
	}
	if ok, err := regularFile(root, stateManifest); err != nil {
		return Image{}, err
	} else if ok {
		img.State = filepath.Join(rootfs, filepath.Dir(stateManifest))
	}
	if img.Kernel == "" && img.Disk == "" {
		return Image{}, fmt.Errorf("not a containerdisk: no /boot/vmlinux, /boot/vmlinuz or /disk/*.qcow2|.raw|.img: %w",
			errdefs.ErrInvalidArgument)
	}
	for _, f := range []struct {
		path string
		max  int64
	}{{img.Kernel, MaxKernelBytes}, {img.Initrd, MaxInitrdBytes}, {img.Disk, 0}} {
		if f.path == "" {
			continue
		}
		rel, _ := filepath.Rel(rootfs, f.path)
		if err := worldReadable(root, rel, f.max); err != nil {
			return Image{}, err
		}
	}
	return img, nil
}

// MaxKernelBytes and MaxInitrdBytes bound a containerdisk's kernel and
// initrd: QEMU reads each whole into its own memory before the guest
// runs, so an author's huge file would be memory taken at start (a
// distribution's uncompressed vmlinux is under 100 MiB, its initrd under
// 200 MiB). The disk is bounded by its virtual size instead (inspectDisk).
const (
	MaxKernelBytes = 256 << 20
	MaxInitrdBytes = 1 << 30
)

// worldReadable refuses a file QEMU could not read: QEMU (and qemu-img)
// run as a uid of their own (pkg/jail) that owns no image file, so they
// read them as "other". Changing the mode here would copy the whole file
// up into the container's writable layer. It refuses one larger than max
// bytes too (0: any size).
func worldReadable(root *os.File, rel string, max int64) error {
	f, err := openBeneath(root, rel, unix.O_PATH)
	if err != nil {
		return refused(rel, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return refused(rel, err)
	}
	if max > 0 && fi.Size() > max {
		return fmt.Errorf("image file /%s: %d bytes, above the %d MiB a VM's start may read into QEMU's memory: %w",
			rel, fi.Size(), max>>20, errdefs.ErrInvalidArgument)
	}
	if fi.Mode().Perm()&0o004 == 0 {
		return fmt.Errorf("image file /%s: mode %04o is not readable by all; QEMU runs as an unprivileged user of its own and reads image files as others do (in the image: chmod 0444): %w",
			rel, fi.Mode().Perm(), errdefs.ErrInvalidArgument)
	}
	return nil
}

// openBeneath opens rel below root without following any symlink and
// without leaving root (RESOLVE_BENEATH also refuses "..").
func openBeneath(root *os.File, rel string, flags uint64) (*os.File, error) {
	fd, err := unix.Openat2(int(root.Fd()), rel, &unix.OpenHow{
		Flags:   flags | unix.O_CLOEXEC | unix.O_NOFOLLOW,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), rel), nil
}

// refused is the error for an image path that is not a plain file or
// directory.
func refused(rel string, err error) error {
	switch {
	case errors.Is(err, unix.ELOOP):
		return fmt.Errorf("image file /%s: a symlink is on its path; a containerdisk's /boot and /disk may hold no symlinks: %w",
			rel, errdefs.ErrInvalidArgument)
	case errors.Is(err, unix.EXDEV):
		return fmt.Errorf("image file /%s: leaves the image root: %w", rel, errdefs.ErrInvalidArgument)
	}
	return fmt.Errorf("image file /%s: %v: %w", rel, err, errdefs.ErrInternal)
}

// regularFile reports whether rel is a regular file beneath root; false if
// it does not exist, an error if it is anything else or a symlink is on
// its path.
func regularFile(root *os.File, rel string) (bool, error) {
	f, err := openBeneath(root, rel, unix.O_PATH)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, refused(rel, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return false, refused(rel, err)
	}
	if !fi.Mode().IsRegular() {
		return false, fmt.Errorf("image file /%s: a %s, not a regular file: %w", rel, kind(fi.Mode()), errdefs.ErrInvalidArgument)
	}
	return true, nil
}

// diskFiles lists the disk images in /disk: regular files with a disk
// extension. A disk-named entry of any other kind is refused, not skipped,
// so the pod author learns why the VM has no disk.
func diskFiles(root *os.File) ([]string, error) {
	dir, err := openBeneath(root, "disk", unix.O_RDONLY|unix.O_DIRECTORY)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		if errors.Is(err, unix.ENOTDIR) {
			// O_NOFOLLOW|O_DIRECTORY on a symlink says ENOTDIR: say which.
			if f, perr := openBeneath(root, "disk", unix.O_PATH); perr == nil {
				fi, serr := f.Stat()
				f.Close()
				if serr == nil && fi.Mode()&os.ModeSymlink != 0 {
					return nil, refused("disk", unix.ELOOP)
				}
			}
			return nil, fmt.Errorf("image file /disk: not a directory: %w", errdefs.ErrInvalidArgument)
		}
		return nil, refused("disk", err)
	}
	defer dir.Close()
	entries, err := dir.ReadDir(-1)
	if err != nil {
		return nil, refused("disk", err)
	}
	var disks []string
	for _, e := range entries {
		if _, ok := diskFormats[filepath.Ext(e.Name())]; !ok {
			continue
		}
		if !e.Type().IsRegular() {
			return nil, fmt.Errorf("image file /disk/%s: a %s, not a regular file: %w", e.Name(), kind(e.Type()), errdefs.ErrInvalidArgument)
		}
		disks = append(disks, e.Name())
	}
	slices.Sort(disks)
	return disks, nil
}

func kind(m os.FileMode) string {
	switch {
	case m&os.ModeSymlink != 0:
		return "symlink"
	case m.IsDir():
		return "directory"
	case m&os.ModeDevice != 0:
		return "device"
	case m&os.ModeNamedPipe != 0:
		return "named pipe"
	case m&os.ModeSocket != 0:
		return "socket"
	}
	return strings.TrimSpace(m.Type().String())
}
