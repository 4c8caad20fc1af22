// Command containerd-shim-vmpod-v2 is vmpod's containerd runtime v2 shim on
// its own: the binary containerd runs, one process per pod, for
// runtime_type io.containerd.vmpod.v2. It is what vm-runtime's shim
// subcommand is, without the labeller, the renderer and the VM core, so no
// client-go, no Kubernetes API (the CRI's annotation keys are
// pkg/ocikeys's) and no libvirt (no cgo: it is built with CGO_ENABLED=0,
// and test/imports keeps libvirt, pkg/vm and k8s.io out) is linked into a
// process that lives as long as its pod: the pod's VM is run by the node daemon, `vm-runtime daemon`,
// which the shim asks over the node API ($VMPOD_NODE_SOCKET).
//
// What it weighs: docs/shim-memory.md.
package main

import (
	"os"

	"github.com/vmpod/vmpod/pkg/shim"
)

const name = "containerd-shim-vmpod-v2"

func main() {
	args := os.Args[1:]
	// The start command re-executes this binary as "<exe> shim ...".
	if len(args) > 0 && args[0] == "shim" {
		args = args[1:]
	}
	shim.Run(name, args)
}
