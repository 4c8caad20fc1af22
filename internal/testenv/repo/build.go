package repo

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// staticCommands are the commands make build builds without cgo.
var staticCommands = map[string]bool{"containerd-shim-vmpod-v2": true, "vmpod-qemu": true}

// Build builds the module's commands (names below cmd/) into dir as make
// build does: the shim and the jailer without cgo. The test fails if one
// does not build.
func Build(t testing.TB, dir string, commands ...string) {
	t.Helper()
	root := Root(t)
	for _, c := range commands {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, c), "./cmd/"+c)
		cmd.Dir = root
		if staticCommands[c] {
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build cmd/%s: %v\n%s", c, err, out)
		}
	}
}

// NodeRuntime are the commands a node runs VMs with: vm-runtime and its
// jailer, vmpod-qemu, which vm-runtime finds next to itself.
var NodeRuntime = []string{"vm-runtime", "vmpod-qemu"}
