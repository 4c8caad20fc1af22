package vmd

import (
	"crypto/ed25519"
	"path/filepath"

	"github.com/vmpod/vmpod/pkg/jail"
	"github.com/vmpod/vmpod/pkg/node"
	"github.com/vmpod/vmpod/pkg/vmspec"
)

// Config is where the node's VMs keep their state and what bounds them.
type Config struct {
	// StateRoot holds the node's libvirt root, the pods' dirs (each
	// pod's VM files: its disk overlay among them), QEMU's uid leases
	// and the VMs' checkpoints.
	StateRoot string
	// CapsCache and KVMCache are the node-wide caches every vmpod process
	// shares (node.Options).
	CapsCache, KVMCache string
	// UIDs are the uids QEMU processes run as, one per pod.
	UIDs jail.Range
	// DiskCap is the most a VM's disk overlay may grow to.
	DiskCap uint64
	// CapsProbe is the command that fills a cold CapsCache in a process
	// of its own (node.Options.ProbeArgv: vm-runtime caps-probe); empty,
	// libvirt probes in this process.
	CapsProbe []string
	// Mounts say which of a container's bind mounts its VM's guest gets
	// as virtio-fs shares (FromOCI): the kubelet's root dir, whose pod
	// volumes are shared, the runtime's image volume dirs (containerd's,
	// under its state dir: vm-runtime daemon --containerd-state-dir;
	// vm-runtime cri's own), whose pod's image volumes are shared
	// read-only, and the host dirs a node admin allows.
	Mounts vmspec.MountRules
	// SigningKey signs each checkpoint the node writes (vm.SignCheckpoint);
	// nil: unsigned. TrustKeys are the keys whose signature makes a
	// checkpoint an image carries one to restore (vm.Request.Trust).
	SigningKey ed25519.PrivateKey
	TrustKeys  []ed25519.PublicKey
	// DefaultMaxVCPUs caps the room to grow in vCPUs a VM whose pod sets
	// no vmpod.io/max-vcpus gets: up to the node's CPUs, at most this
	// (vm.Request.DefaultMaxVCPUs). 0: such a VM gets none.
	DefaultMaxVCPUs int
}

// DefaultDiskCap is the default Config.DiskCap: 20 GiB.
const DefaultDiskCap = 20 << 30

// DefaultMaxVCPUs is the node's usual DefaultMaxVCPUs (vm-runtime's
// --default-max-vcpus): a VM of one vCPU can grow to 4 on a node with
// that many CPUs without its pod asking, which costs it 1 MiB of
// overhead a vCPU (vmspec.OverheadTCG) and, under KVM, nothing plugged
// until a resize asks. Config's zero value gives no room.
const DefaultMaxVCPUs = 4

// WithDefaults fills what c leaves empty with the node's usual places.
func (c Config) WithDefaults() Config {
	if c.StateRoot == "" {
		c.StateRoot = "/var/lib/vmpod"
	}
	if c.CapsCache == "" {
		c.CapsCache = "/var/cache/vmpod/qemu-capabilities"
	}
	if c.KVMCache == "" {
		c.KVMCache = node.DefaultKVMCache
	}
	if c.UIDs.Count == 0 {
		c.UIDs = jail.DefaultRange
	}
	if c.DiskCap == 0 {
		c.DiskCap = DefaultDiskCap
	}
	if c.Mounts.KubeletRoot == "" {
		c.Mounts.KubeletRoot = vmspec.DefaultKubeletRoot
	}
	return c
}

func (c Config) libvirtRoot() string         { return filepath.Join(c.StateRoot, "libvirt") }
func (c Config) checkpointDir() string       { return filepath.Join(c.StateRoot, "vms") }
func (c Config) checkpoint(id string) string { return filepath.Join(c.checkpointDir(), id+".json") }
