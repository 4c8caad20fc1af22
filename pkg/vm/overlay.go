package vm

import (
	"context"
	"fmt"
	"os/exec"

	"github.com/containerd/errdefs"
)

// createOverlay makes a qcow2 file whose backing file is the image's disk,
// so the guest writes to the pod's state dir and the read-only image layer
// is never copied or changed.
func createOverlay(ctx context.Context, backing, format, overlay string) error {
	cmd := exec.CommandContext(ctx, "qemu-img", "create", "-q", "-f", "qcow2",
		"-o", "backing_file="+backing+",backing_fmt="+format, overlay)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("qcow2 overlay over %s: %v: %s: %w", backing, err, out, errdefs.ErrInternal)
	}
	return nil
}
