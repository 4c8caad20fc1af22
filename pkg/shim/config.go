package shim

import (
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/vmpod/vmpod/pkg/jail"
	"github.com/vmpod/vmpod/pkg/node"
	"github.com/vmpod/vmpod/pkg/vm"
)

// Config is where the shim keeps things. containerd starts shims with its
// own environment, so these come from containerd's environment.
type Config struct {
	// StateRoot holds one dir per pod and the QEMU uid leases
	// ($VMPOD_STATE_ROOT, /var/lib/vmpod: on disk, as a VM's disk overlay
	// lives there; on tmpfs it would fill the node's memory).
	StateRoot string
	// CapsCache is the node-wide warm copy of libvirt's QEMU capabilities
	// ($VMPOD_CAPS_CACHE, /var/cache/vmpod/qemu-capabilities).
	CapsCache string
	// KVMCache is the node's KVM probe verdict, shared with the labeller
	// ($VMPOD_KVM_CACHE, /var/lib/vmpod/kvm-probe.json).
	KVMCache string
	// UIDs are the uids (and gids) QEMU processes run as, one per pod
	// ($VMPOD_QEMU_UIDS, FIRST:COUNT, jail.DefaultRange).
	UIDs jail.Range
	// DiskCap is the most a VM's disk overlay (and any file its QEMU
	// writes) may grow to, in bytes ($VMPOD_DISK_CAP, a quantity such as
	// 20Gi; DefaultDiskCap). A guest writing past it gets I/O errors.
	DiskCap uint64
}

// DefaultDiskCap is the default Config.DiskCap: 20 GiB.
const DefaultDiskCap = 20 << 30

// ConfigFromEnv reads the Config from the environment.
func ConfigFromEnv() (Config, error) {
	c := Config{
		StateRoot: os.Getenv("VMPOD_STATE_ROOT"),
		CapsCache: os.Getenv("VMPOD_CAPS_CACHE"),
		KVMCache:  os.Getenv("VMPOD_KVM_CACHE"),
	}
	if v := os.Getenv("VMPOD_QEMU_UIDS"); v != "" {
		r, err := jail.ParseRange(v)
		if err != nil {
			return Config{}, fmt.Errorf("VMPOD_QEMU_UIDS: %w", err)
		}
		c.UIDs = r
	}
	if v := os.Getenv("VMPOD_DISK_CAP"); v != "" {
		q, err := resource.ParseQuantity(v)
		if err != nil || q.Sign() <= 0 {
			return Config{}, fmt.Errorf("VMPOD_DISK_CAP %q: want a positive quantity of bytes such as 20Gi", v)
		}
		c.DiskCap = uint64(q.Value())
	}
	return c.withDefaults(), nil
}

func (c Config) withDefaults() Config {
	if c.StateRoot == "" {
		c.StateRoot = "/var/lib/vmpod"
	}
	if c.UIDs.Count == 0 {
		c.UIDs = jail.DefaultRange
	}
	if c.DiskCap == 0 {
		c.DiskCap = DefaultDiskCap
	}
	if c.CapsCache == "" {
		c.CapsCache = "/var/cache/vmpod/qemu-capabilities"
	}
	if c.KVMCache == "" {
		c.KVMCache = node.DefaultKVMCache
	}
	return c
}

// podDir is the state dir of the pod whose sandbox is sandboxID.
func (c Config) podDir(sandboxID string) string { return vm.PodLayout(c.StateRoot, sandboxID).Dir }

// nodeOptions open a pod's libvirt (node.Open).
func (c Config) nodeOptions() node.Options {
	return node.Options{CapsCache: c.CapsCache, KVMCache: c.KVMCache, Pod: true}
}
