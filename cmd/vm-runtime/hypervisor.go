package main

import (
	"context"
	"fmt"
	"os"

	"github.com/vmpod/vmpod/pkg/node"
	"github.com/vmpod/vmpod/pkg/node/embedded"
	"github.com/vmpod/vmpod/pkg/virt/remote"
)

// hypervisorCmd is the helper a pod's shim starts when it needs libvirt
// (pkg/virt/remote): it opens the pod's embedded libvirt root, serves the
// shim on descriptor 3 until the shim hangs up, then closes libvirt and
// exits. QEMU keeps running; the next helper re-attaches to it.
func hypervisorCmd(args []string) int {
	root, o, err := node.ParseHelperArgs(args)
	if err != nil {
		fmt.Fprintf(os.Stderr, "vm-runtime %v\n", err)
		return 2
	}
	conn, err := remote.HelperConn()
	if err != nil {
		fmt.Fprintf(os.Stderr, "vm-runtime hypervisor: %v\n", err)
		return 2
	}
	defer conn.Close()
	hv, err := embedded.Open(context.Background(), root, o)
	if err != nil {
		// The shim's first call reports it.
		remote.Serve(conn, nil, err)
		return 1
	}
	remote.Serve(conn, hv, nil)
	if err := hv.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "vm-runtime hypervisor: close libvirt: %v\n", err)
		return 1
	}
	return 0
}
