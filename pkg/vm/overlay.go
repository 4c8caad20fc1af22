package vm

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/vmpod/vmpod/internal/qcow2"
)

// MaxDiskBytes is the largest virtual size a containerdisk's disk may
// claim (4 TiB). A qcow2 header can claim up to 2^63 bytes; the overlay
// over it would grow without a bound the node can plan for.
const MaxDiskBytes = 4 << 40

// diskInfo is what the intake learned of a containerdisk's disk.
type diskInfo struct {
	VirtualSize uint64
}

// inspectDisk checks a containerdisk's disk before anything opens it as an
// image: its content must be the format its name says (no probing), and a
// qcow2 may have no backing file and no external data file, which would
// make QEMU open a host file or device chosen by the pod author, nor any
// table QEMU would refuse (internal/qcow2's Check and CheckLayout). Only
// the fixed header is read, by the runtime in Go: no image tool parses the
// pod author's bytes, and nothing the header names is opened. The disk
// must be a regular file (opened without following a link or blocking on
// a FIFO). Refusals are InvalidArgument and name the file.
func inspectDisk(path, format string) (diskInfo, error) {
	name := "/disk/" + filepath.Base(path)
	bad := func(format string, a ...any) (diskInfo, error) {
		return diskInfo{}, fmt.Errorf("image file %s: %s: %w", name, fmt.Sprintf(format, a...), errdefs.ErrInvalidArgument)
	}
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return diskInfo{}, fmt.Errorf("image file %s: %v: %w", name, err, errdefs.ErrInternal)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return diskInfo{}, fmt.Errorf("image file %s: %v: %w", name, err, errdefs.ErrInternal)
	}
	if !fi.Mode().IsRegular() {
		return bad("a %s, not a regular file", fi.Mode().Type())
	}
	h, err := qcow2.ReadHeader(f)
	isQcow2 := !errors.Is(err, qcow2.ErrNotQcow2)
	switch {
	case format == "qcow2" && !isQcow2:
		return bad("named .qcow2 but not qcow2 (no qcow2 header); name a raw disk .raw or .img")
	case format == "raw" && isQcow2:
		return bad("qcow2 content under a raw disk's name; name it .qcow2")
	case format == "raw":
		return checkSize(bad, uint64(fi.Size()))
	case err != nil:
		return bad("%v", err)
	case h.BackingFileOffset != 0 || h.BackingFileSize != 0:
		return bad("has a backing file (%q); a containerdisk's disk must stand alone", backingName(f, h))
	case h.IncompatFeatures&qcow2.IncompatDataFile != 0:
		return bad("has an external data file (%q); a containerdisk's disk must stand alone", qcow2.DataFileName(f, h))
	}
	if info, err := checkSize(bad, h.Size); err != nil {
		return info, err
	}
	if err := h.Check(MaxDiskBytes); err != nil {
		return bad("%v", err)
	}
	if err := h.CheckLayout(fi.Size()); err != nil {
		return bad("%v", err)
	}
	return diskInfo{VirtualSize: h.Size}, nil
}

func checkSize(bad func(string, ...any) (diskInfo, error), size uint64) (diskInfo, error) {
	switch {
	case size == 0:
		return bad("virtual size 0")
	case size > MaxDiskBytes:
		return bad("virtual size %d GiB is above the maximum of %d GiB", size>>30, MaxDiskBytes>>30)
	}
	return diskInfo{VirtualSize: size}, nil
}

// backingName is the backing file a qcow2 header names, for the refusal
// (read, bounded, from the header's cluster; never opened).
func backingName(f *os.File, h qcow2.Header) string {
	unread := fmt.Sprintf("%d bytes at offset %d", h.BackingFileSize, h.BackingFileOffset)
	if h.BackingFileOffset > 1<<21 { // beyond the largest first cluster, where QEMU reads it
		return unread
	}
	b := make([]byte, min(h.BackingFileSize, 1023))
	if _, err := f.ReadAt(b, int64(h.BackingFileOffset)); err != nil {
		return unread
	}
	return string(b)
}

// createOverlay makes a qcow2 file whose backing file is the image's disk,
// so the guest writes to the pod's state dir and the read-only image layer
// is never copied or changed. The runtime writes it (internal/qcow2: the
// bytes `qemu-img create -f qcow2 -u -b backing -F format` writes) into
// the VM's fresh dir, never through a link, and gives it to the pod's
// QEMU uid and gid. size is the image's virtual size, rounded up to 512
// bytes as qemu-img would.
func createOverlay(backing, format string, size uint64, overlay string, uid, gid uint32) (retErr error) {
	fail := func(err error) error {
		return fmt.Errorf("qcow2 overlay over %s: %v: %w", backing, err, errdefs.ErrInternal)
	}
	f, err := os.OpenFile(overlay, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return fail(err)
	}
	defer func() {
		if retErr != nil {
			os.Remove(overlay)
		}
	}()
	err = qcow2.WriteOverlay(f, backing, format, (size+511)&^511)
	if err == nil {
		err = f.Chown(int(uid), int(gid))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fail(err)
	}
	return nil
}
