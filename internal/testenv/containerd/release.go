package containerd

import (
	"fmt"
	"path/filepath"
)

// Release is a containerd the harness can run. Each has its own config
// layout, install script and binary dir.
type Release int

const (
	// Containerd24 is containerd 2.4.2 (config version 4; task API v3 and
	// v2): the default.
	Containerd24 Release = iota
	// Containerd17 is containerd 1.7.35 (config version 2; task API v2
	// only, and the pre-bootstrap shim start).
	Containerd17
)

func (r Release) String() string {
	switch r {
	case Containerd24:
		return "containerd 2.4.2"
	case Containerd17:
		return "containerd 1.7.35"
	default:
		return fmt.Sprintf("Release(%d)", int(r))
	}
}

// binEnv names the variable that points at prebuilt binaries.
func (r Release) binEnv() string {
	if r == Containerd17 {
		return "VMPOD_CONTAINERD17_BIN"
	}
	return "VMPOD_CONTAINERD_BIN"
}

// install is the script that builds the release and the dir it fills.
func (r Release) install(repo string) (script, binDir string) {
	if r == Containerd17 {
		return filepath.Join(repo, "hack", "containerd", "install-1.7.sh"), filepath.Join(repo, "_output", "containerd-1.7", "bin")
	}
	return filepath.Join(repo, "hack", "containerd", "install.sh"), filepath.Join(repo, "_output", "bin")
}
