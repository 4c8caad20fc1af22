package vm

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"
)

// MaxDiskBytes is the largest virtual size a containerdisk's disk may
// claim (4 TiB). A qcow2 header can claim up to 2^63 bytes; the overlay
// over it would grow without a bound the node can plan for.
const MaxDiskBytes = 4 << 40

// qcow2Magic starts every qcow2 file.
var qcow2Magic = []byte{'Q', 'F', 'I', 0xfb}

// diskInfo is what the intake learned of a containerdisk's disk.
type diskInfo struct {
	VirtualSize uint64
}

// inspectDisk checks a containerdisk's disk before anything opens it as an
// image: its content must be the format its name says (no probing), and a
// qcow2 may have no backing file and no external data file, which would
// make QEMU open a host file or device chosen by the pod author.
// qemu-img reads only the header: the image is opened with its format
// given, read-only and shared, with "backing": null, so no backing file is
// ever opened even when the header names one; and it runs in the pod's
// QEMU jail (qemuImgJail), which shows it this one file. Refusals are
// InvalidArgument and name the file.
func inspectDisk(ctx context.Context, q qemuImgJail, path, format string) (diskInfo, error) {
	name := "/disk/" + filepath.Base(path)
	bad := func(format string, a ...any) (diskInfo, error) {
		return diskInfo{}, fmt.Errorf("image file %s: %s: %w", name, fmt.Sprintf(format, a...), errdefs.ErrInvalidArgument)
	}
	isQcow2, err := hasQcow2Magic(path)
	if err != nil {
		return diskInfo{}, fmt.Errorf("image file %s: %v: %w", name, err, errdefs.ErrInternal)
	}
	switch {
	case format == "qcow2" && !isQcow2:
		return bad("named .qcow2 but not qcow2 (no qcow2 header); name a raw disk .raw or .img")
	case format == "raw" && isQcow2:
		return bad("qcow2 content under a raw disk's name; name it .qcow2")
	}

	spec := map[string]any{"driver": format, "file": map[string]any{"driver": "file", "filename": path}}
	if format == "qcow2" {
		spec["backing"] = nil
	}
	js, err := json.Marshal(spec)
	if err != nil {
		return diskInfo{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, stderr, err := q.run(ctx, []string{path}, nil, "info", "--output=json", "-U", "json:"+string(js))
	if errdefs.IsInternal(err) {
		return diskInfo{}, fmt.Errorf("image file %s: %w", name, err)
	}
	if err != nil {
		return bad("qemu-img cannot read it as %s: %v: %s", format, err, bytes.TrimSpace(stderr))
	}
	var info struct {
		VirtualSize     json.Number `json:"virtual-size"`
		BackingFilename string      `json:"backing-filename"`
		FormatSpecific  struct {
			Data struct {
				DataFile string `json:"data-file"`
				Corrupt  bool   `json:"corrupt"`
			} `json:"data"`
		} `json:"format-specific"`
	}
	if err := json.Unmarshal(out, &info); err != nil {
		return diskInfo{}, fmt.Errorf("image file %s: qemu-img info: %v: %w", name, err, errdefs.ErrInternal)
	}
	switch {
	case info.BackingFilename != "":
		return bad("has a backing file (%q); a containerdisk's disk must stand alone", info.BackingFilename)
	case info.FormatSpecific.Data.DataFile != "":
		return bad("has an external data file (%q); a containerdisk's disk must stand alone", info.FormatSpecific.Data.DataFile)
	case info.FormatSpecific.Data.Corrupt:
		return bad("qcow2 marked corrupt")
	}
	size, err := strconv.ParseUint(info.VirtualSize.String(), 10, 64)
	if err != nil || size == 0 {
		return bad("virtual size %q is not a size", info.VirtualSize)
	}
	if size > MaxDiskBytes {
		return bad("virtual size %d GiB is above the maximum of %d GiB", size>>30, MaxDiskBytes>>30)
	}
	return diskInfo{VirtualSize: size}, nil
}

func hasQcow2Magic(path string) (bool, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return false, err
	}
	defer f.Close()
	head := make([]byte, len(qcow2Magic))
	if _, err := io.ReadFull(f, head); err != nil {
		return false, nil // shorter than a qcow2 header: not qcow2
	}
	return bytes.Equal(head, qcow2Magic), nil
}

// createOverlay makes a qcow2 file whose backing file is the image's disk,
// so the guest writes to the pod's state dir and the read-only image layer
// is never copied or changed. The command is an argument list with no
// option string a file name could add options to, and -u keeps qemu-img
// from opening the backing file at all (its size comes from the intake):
// its jail shows it the overlay alone, which root makes empty first in the
// VM's fresh dir (never through a link) for the jail to bind.
func createOverlay(ctx context.Context, q qemuImgJail, backing, format string, size uint64, overlay string) error {
	f, err := os.OpenFile(overlay, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("qcow2 overlay: %v: %w", err, errdefs.ErrInternal)
	}
	f.Close()
	_, stderr, err := q.run(ctx, nil, []string{overlay}, "create", "-q", "-f", "qcow2", "-u",
		"-b", backing, "-F", format, overlay, strconv.FormatUint(size, 10))
	if errdefs.IsInternal(err) {
		return fmt.Errorf("qcow2 overlay over %s: %w", backing, err)
	}
	if err != nil {
		return fmt.Errorf("qcow2 overlay over %s: %v: %s: %w", backing, err, bytes.TrimSpace(stderr), errdefs.ErrInternal)
	}
	return nil
}
