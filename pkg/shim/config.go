package shim

import (
	"os"

	node "github.com/vmpod/vmpod/api/node/v1"
)

// Config is where the shim finds things. containerd starts shims with its
// own environment, so these come from containerd's environment.
type Config struct {
	// Socket is the node daemon's API (`vm-runtime daemon`), which runs
	// every VM of the node ($VMPOD_NODE_SOCKET, node.DefaultSocket).
	Socket string
	// StateRoot holds the shims' sockets when containerd names no dir
	// for them ($VMPOD_STATE_ROOT, /var/lib/vmpod).
	StateRoot string
}

// ConfigFromEnv reads the Config from the environment.
func ConfigFromEnv() Config {
	return Config{Socket: os.Getenv("VMPOD_NODE_SOCKET"), StateRoot: os.Getenv("VMPOD_STATE_ROOT")}.withDefaults()
}

func (c Config) withDefaults() Config {
	if c.StateRoot == "" {
		c.StateRoot = "/var/lib/vmpod"
	}
	if c.Socket == "" {
		c.Socket = node.DefaultSocket
	}
	return c
}
