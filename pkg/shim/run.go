package shim

import (
	"context"
	"fmt"
	"os"

	"github.com/containerd/containerd/v2/pkg/shim"
)

// Run is the shim's main: containerd's shim bootstrap (start, delete, and
// the long-lived server) with vmpod's manager and task service. args are
// the shim's flags and action, without the program name.
func Run(argv0 string, args []string) {
	// First: the node's namespace must not reach any child.
	node := inheritNodeNetns()
	cfg, err := ConfigFromEnv()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", RuntimeName, err)
		os.Exit(1)
	}
	// containerd 1.7 and CRI-O start shims the way pkg/shim refuses.
	if done, err := startLegacy(context.Background(), NewManager(cfg), args); done {
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v", RuntimeName, err)
			os.Exit(1)
		}
		return
	}
	register(cfg, node)
	// containerd's shim package parses os.Args itself.
	setArgs(argv0, args)
	shim.RunShim(context.Background(), NewManager(cfg), func(c *shim.Config) {
		// QEMU is libvirt's child and libvirt waits for it; a reaper in
		// this process would steal those exit statuses. Without a
		// subreaper an orphaned QEMU goes to init, as after a shim crash.
		c.NoSubreaper = true
		c.NoReaper = true
	})
}
