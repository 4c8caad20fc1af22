package shim

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/vmpod/vmpod/internal/ckpt"
	"github.com/vmpod/vmpod/pkg/vm"
)

// checkpointVersion is bumped when the checkpoint's meaning changes; a
// reader refuses versions it does not know rather than guess.
const checkpointVersion = 1

// checkpoint is what a task leaves on disk so that the `delete` command
// can clean up after a shim that died: everything it must undo.
type checkpoint struct {
	Version int    `json:"version"`
	ID      string `json:"id"`
	Kind    string `json:"kind"` // "sandbox" or "vm"
	Bundle  string `json:"bundle"`
	PodDir  string `json:"podDir"`
	// Held is what the task holds on the node, which vm.Undo removes: for
	// a VM all of it, for the sandbox the cgroup the shim entered.
	vm.Held
}

func checkpointPath(podDir, id string) string {
	return filepath.Join(podDir, "tasks", id+".json")
}

// save writes the checkpoint atomically (internal/ckpt), so a reader sees
// the old one or the new one, never a torn one.
func (c checkpoint) save() error {
	c.Version = checkpointVersion
	return ckpt.WriteAtomic(checkpointPath(c.PodDir, c.ID), c)
}

func loadCheckpoint(podDir, id string) (checkpoint, error) {
	var c checkpoint
	data, err := os.ReadFile(checkpointPath(podDir, id))
	if err != nil {
		return c, err
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return c, fmt.Errorf("checkpoint %s: %w", id, err)
	}
	if c.Version != checkpointVersion {
		return c, fmt.Errorf("checkpoint %s: version %d, want %d", id, c.Version, checkpointVersion)
	}
	return c, nil
}

func removeCheckpoint(podDir, id string) error {
	err := os.Remove(checkpointPath(podDir, id))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// remainingTasks lists the tasks of a pod that still have checkpoints.
func remainingTasks(podDir string) []string {
	entries, _ := os.ReadDir(filepath.Join(podDir, "tasks"))
	var ids []string
	for _, e := range entries {
		if filepath.Ext(e.Name()) == ".json" {
			ids = append(ids, e.Name()[:len(e.Name())-len(".json")])
		}
	}
	return ids
}
