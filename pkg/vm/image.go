package vm

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/containerd/errdefs"
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
}

var diskFormats = map[string]string{".qcow2": "qcow2", ".raw": "raw", ".img": "raw"}

// FindImage looks into a containerdisk's root filesystem. Only regular files
// count: a symlink in an image could otherwise point the VM at a host path.
func FindImage(rootfs string) (Image, error) {
	var img Image
	for _, k := range []string{"boot/vmlinux", "boot/vmlinuz"} {
		if ok, err := regularFile(rootfs, k); err != nil {
			return Image{}, err
		} else if ok {
			img.Kernel = filepath.Join(rootfs, k)
			break
		}
	}
	if ok, err := regularFile(rootfs, "boot/initrd.img"); err != nil {
		return Image{}, err
	} else if ok {
		img.Initrd = filepath.Join(rootfs, "boot/initrd.img")
	}

	entries, err := os.ReadDir(filepath.Join(rootfs, "disk"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return Image{}, err
	}
	var disks []string
	for _, e := range entries {
		if _, ok := diskFormats[filepath.Ext(e.Name())]; ok && e.Type().IsRegular() {
			disks = append(disks, e.Name())
		}
	}
	slices.Sort(disks)
	switch len(disks) {
	case 0:
	case 1:
		img.Disk = filepath.Join(rootfs, "disk", disks[0])
		img.DiskFormat = diskFormats[filepath.Ext(disks[0])]
	default:
		return Image{}, fmt.Errorf("containerdisk has %d disks under /disk/ (%v), want one: %w",
			len(disks), disks, errdefs.ErrInvalidArgument)
	}
	if img.Kernel == "" && img.Disk == "" {
		return Image{}, fmt.Errorf("not a containerdisk: no /boot/vmlinux, /boot/vmlinuz or /disk/*.qcow2|.raw|.img: %w",
			errdefs.ErrInvalidArgument)
	}
	return img, nil
}

func regularFile(root, rel string) (bool, error) {
	fi, err := os.Lstat(filepath.Join(root, rel))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case err != nil:
		return false, err
	}
	return fi.Mode().IsRegular(), nil
}
