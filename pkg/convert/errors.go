package convert

import (
	"fmt"

	"github.com/containerd/errdefs"
)

// unsupported is a Spec this node cannot run; key names what the pod asked.
func unsupported(key, value, why string) error {
	return fmt.Errorf("%s: %q: %s: %w", key, value, why, errdefs.ErrFailedPrecondition)
}

// missingPath is Paths lacking what the Spec needs: a bug in the runtime,
// not the user's doing.
func missingPath(what string) error {
	return fmt.Errorf("paths: %s is required: %w", what, errdefs.ErrInternal)
}
