// Command containerd-shim-vmpod-v2 is vmpod's containerd runtime v2 shim on
// its own: the binary containerd runs, one process per pod, for
// runtime_type io.containerd.vmpod.v2. It is what vm-runtime's shim
// subcommand is, without the labeller and the renderer, so no client-go
// and no Kubernetes API group but core/v1 (pkg/vmspec's) is linked into a
// process that lives as long as its pod; and without libvirt (no cgo: it
// is built with CGO_ENABLED=0, and test/imports keeps libvirt out): when
// the pod needs libvirt the shim starts `vm-runtime hypervisor`, found
// next to it, for as long as it needs it (pkg/virt/remote). Called as
// vmpod-qemu (the link the shim makes) it is QEMU's jailer (pkg/jail).
//
// What it weighs: docs/shim-memory.md.
package main

import (
	"os"
	"path/filepath"

	"github.com/vmpod/vmpod/pkg/jail"
	"github.com/vmpod/vmpod/pkg/shim"
)

const name = "containerd-shim-vmpod-v2"

func main() {
	if filepath.Base(os.Args[0]) == jail.EmulatorName {
		// libvirt starts this as the domain's emulator, with QEMU's arguments.
		os.Exit(jail.Main(os.Args[1:]))
	}
	args := os.Args[1:]
	// The start command re-executes this binary as "<exe> shim ...".
	if len(args) > 0 && args[0] == "shim" {
		args = args[1:]
	}
	shim.Run(name, args)
}
