package shim

import (
	"os"
	"path/filepath"

	"github.com/vmpod/vmpod/pkg/node"
)

// Config is where the shim keeps things. containerd starts shims with its
// own environment, so these come from containerd's environment.
type Config struct {
	// StateRoot holds one dir per pod ($VMPOD_STATE_ROOT, /run/vmpod).
	StateRoot string
	// CapsCache is the node-wide warm copy of libvirt's QEMU capabilities
	// ($VMPOD_CAPS_CACHE, /var/cache/vmpod/qemu-capabilities).
	CapsCache string
	// KVMCache is the node's KVM probe verdict, shared with the labeller
	// ($VMPOD_KVM_CACHE, /var/lib/vmpod/kvm-probe.json).
	KVMCache string
}

// ConfigFromEnv reads the Config from the environment.
func ConfigFromEnv() Config {
	return Config{
		StateRoot: os.Getenv("VMPOD_STATE_ROOT"),
		CapsCache: os.Getenv("VMPOD_CAPS_CACHE"),
		KVMCache:  os.Getenv("VMPOD_KVM_CACHE"),
	}.withDefaults()
}

func (c Config) withDefaults() Config {
	if c.StateRoot == "" {
		c.StateRoot = "/run/vmpod"
	}
	if c.CapsCache == "" {
		c.CapsCache = "/var/cache/vmpod/qemu-capabilities"
	}
	if c.KVMCache == "" {
		c.KVMCache = node.DefaultKVMCache
	}
	return c
}

// podDirIDLen bounds the sandbox id in the pod's dir name: libvirt and QEMU
// put unix sockets several levels below it, and a socket path must stay
// under 108 bytes. 16 hex digits of a random 256-bit id do not collide on a
// node.
const podDirIDLen = 16

// podDir is the state dir of the pod whose sandbox is sandboxID.
func (c Config) podDir(sandboxID string) string {
	if len(sandboxID) > podDirIDLen {
		sandboxID = sandboxID[:podDirIDLen]
	}
	return filepath.Join(c.StateRoot, "pods", sandboxID)
}
