package vm

import (
	"context"
	"path/filepath"
)

// CrashCheckpoint does what a checkpoint of v does up to the point where
// the process that runs it may die with the VM changed (capture): the
// guest's memory written into dir, its disk on the top layer, the guest
// paused. Nothing after it runs, as nothing would in a killed process.
func (v *VM) CrashCheckpoint(ctx context.Context, dir string) error {
	_, err := v.capture(ctx, filepath.Join(dir, CheckpointState), true)
	return err
}

// TopLayer and CheckpointMark are where a checkpoint keeps its top layer
// and its mark while it runs.
func (l Layout) TopLayer() string       { return l.topLayer() }
func (l Layout) CheckpointMark() string { return l.checkpointMark() }

// RestoreState is where a VM restored beside another keeps its copy of
// the state until Start.
func (l Layout) RestoreState() string { return l.restoreState() }
