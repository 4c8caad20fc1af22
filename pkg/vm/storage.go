package vm

import (
	"errors"
	"fmt"
	"strings"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"
)

// StorageError is err, reclassified when it says the node's state dir
// (dir) could not be written: full (ENOSPC), over quota (EDQUOT) or
// read-only (EROFS), whether as an errno in err's chain or as the text
// libvirt, qemu-img and Go give for them (an error formatted with %v
// keeps only the text). Such an error is
// ResourceExhausted (FailedPrecondition for a read-only one), not the
// Internal it was classified as where it happened: the node, not the
// runtime, is at fault, and it passes once space is back. Its message
// names dir and what it has free. Any other err is returned as it is.
func StorageError(err error, dir string) error {
	if err == nil {
		return nil
	}
	var errno unix.Errno
	if !errors.As(err, &errno) || (errno != unix.ENOSPC && errno != unix.EDQUOT && errno != unix.EROFS) {
		switch msg := strings.ToLower(err.Error()); {
		case strings.Contains(msg, "no space left on device"):
			errno = unix.ENOSPC
		case strings.Contains(msg, "disk quota exceeded"):
			errno = unix.EDQUOT
		case strings.Contains(msg, "read-only file system"):
			errno = unix.EROFS
		default:
			return err
		}
	}
	free := freeSpace(dir)
	if errno == unix.EROFS {
		return fmt.Errorf("the node's state dir %s is read-only (%s): %v: %w", dir, free, err, errdefs.ErrFailedPrecondition)
	}
	return fmt.Errorf("the node's state dir %s is out of space (%s, %s; this passes once space is freed there): %v: %w",
		dir, unix.ErrnoName(errno), free, err, errdefs.ErrResourceExhausted)
}
