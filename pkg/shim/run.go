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
	cfg := ConfigFromEnv()
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
		// The shim starts no process: its VM is the node daemon's.
		c.NoSubreaper = true
		c.NoReaper = true
	})
}
