package cri

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/containerd/errdefs"

	"github.com/vmpod/vmpod/internal/untar"
	"github.com/vmpod/vmpod/pkg/vmd"
)

// Config is where the server keeps things and what the node gives it.
type Config struct {
	// Config is the node's VMs' (pkg/vmd): the state root, which holds
	// the images and the server's checkpoints too, the caches, QEMU's
	// uids and the disk cap.
	vmd.Config
	// NetnsDir is where pod network namespaces are bind-mounted.
	NetnsDir string
	// CNIConfDir and CNIBinDirs are the node's CNI config and plugins, as
	// containerd's: the first config file in the dir, by name, is the pod
	// network.
	CNIConfDir string
	CNIBinDirs []string
	// ImageMaxBytes, ImageMaxEntries and ImageMaxDepth bound what one
	// image may unpack into, its layers being the pod author's: the
	// bytes of its files, each at its expanded size (default DiskCap: an
	// image's disk is no larger than the disk a VM of it may grow to),
	// the tar entries of all its layers and the dirs their paths imply
	// (DefaultImageMaxEntries), and the components of a path in it
	// (DefaultImageMaxDepth). A pull past one fails with
	// ResourceExhausted, naming the image, the layer, the entry and the
	// bound, and leaves nothing on disk.
	ImageMaxBytes   uint64
	ImageMaxEntries uint64
	ImageMaxDepth   int
	// RegistryMirrors are registries whose images are fetched from
	// another (Mirrors); none by default.
	RegistryMirrors Mirrors
	// StreamAddr is where the streaming server (exec, attach,
	// port-forward) listens, host:port; port 0 picks a free one at start.
	// The kubelet connects to it and proxies the streams, so the node's
	// loopback is enough.
	StreamAddr string
	// MaxSessionsPerPod and MaxSessionsPerNode bound the sessions of
	// each kind (execs, streamed or ExecSync; attaches; port-forward
	// connections) open at once in one pod and on the node (defaults
	// DefaultMaxSessionsPerPod, DefaultMaxSessionsPerNode). One past a
	// bound fails with ResourceExhausted naming it.
	MaxSessionsPerPod  int
	MaxSessionsPerNode int
	// DefaultCgroupParent is the cgroupfs parent of the pods whose
	// sandbox names no cgroup_parent (critest, crictl without one): each
	// such pod gets <DefaultCgroupParent>/pod<sandbox id>.
	DefaultCgroupParent string
	// CgroupDriver is the node's cgroup driver, CgroupfsDriver or
	// SystemdDriver, which RuntimeConfig tells the kubelet (it then forms
	// the pods' cgroup_parent in that driver's form); "" detects it:
	// systemd where systemd is the init system, cgroupfs elsewhere.
	CgroupDriver string
}

// The cgroup drivers (Config.CgroupDriver).
const (
	CgroupfsDriver = "cgroupfs"
	SystemdDriver  = "systemd"
)

// ParseCgroupDriver checks a cgroup driver's name.
func ParseCgroupDriver(s string) (string, error) {
	switch s {
	case CgroupfsDriver, SystemdDriver:
		return s, nil
	}
	return "", fmt.Errorf("cgroup driver %q: want %s or %s: %w", s, CgroupfsDriver, SystemdDriver, errdefs.ErrInvalidArgument)
}

// detectCgroupDriver is systemd where systemd is the init system (what
// sd_booted checks: /run/systemd/system exists), cgroupfs elsewhere.
func detectCgroupDriver() string {
	if fi, err := os.Stat("/run/systemd/system"); err == nil && fi.IsDir() {
		return SystemdDriver
	}
	return CgroupfsDriver
}

const (
	// DefaultImageMaxEntries is the default Config.ImageMaxEntries. A
	// containerdisk holds a handful of files (a disk, a kernel, an
	// initrd); the bound leaves room for a distribution's root file
	// system beside them.
	DefaultImageMaxEntries = 65536
	// DefaultImageMaxDepth is the default Config.ImageMaxDepth, far
	// deeper than /disk/<name> or /boot/vmlinuz.
	DefaultImageMaxDepth = 64
)

const (
	// DefaultStreamAddr is the default Config.StreamAddr: the node's
	// loopback, a port chosen at start (as containerd's default
	// stream_server_port "0").
	DefaultStreamAddr = "127.0.0.1:0"
	// DefaultCgroupParent is the default Config.DefaultCgroupParent: a
	// cgroup of vmpod's own beside the kubelet's kubepods, so such pods
	// are neither in the root cgroup nor under another runtime's.
	DefaultCgroupParent = "/vmpod"
)

// WithDefaults fills what c leaves empty with the node's usual places.
func (c Config) WithDefaults() Config {
	c.Config = c.Config.WithDefaults()
	if c.NetnsDir == "" {
		c.NetnsDir = "/run/vmpod/netns"
	}
	if c.CNIConfDir == "" {
		c.CNIConfDir = "/etc/cni/net.d"
	}
	if len(c.CNIBinDirs) == 0 {
		c.CNIBinDirs = []string{"/opt/cni/bin", "/usr/lib/cni"}
	}
	if c.ImageMaxBytes == 0 {
		c.ImageMaxBytes = c.DiskCap
	}
	if c.ImageMaxEntries == 0 {
		c.ImageMaxEntries = DefaultImageMaxEntries
	}
	if c.ImageMaxDepth == 0 {
		c.ImageMaxDepth = DefaultImageMaxDepth
	}
	if c.StreamAddr == "" {
		c.StreamAddr = DefaultStreamAddr
	}
	if c.DefaultCgroupParent == "" {
		c.DefaultCgroupParent = DefaultCgroupParent
	}
	if c.MaxSessionsPerPod <= 0 {
		c.MaxSessionsPerPod = DefaultMaxSessionsPerPod
	}
	if c.MaxSessionsPerNode <= 0 {
		c.MaxSessionsPerNode = DefaultMaxSessionsPerNode
	}
	if c.CgroupDriver == "" {
		c.CgroupDriver = detectCgroupDriver()
	}
	return c
}

// imageLimits are the bounds of one image's unpack.
func (c Config) imageLimits() untar.Limits {
	return untar.Limits{Bytes: c.ImageMaxBytes, Entries: c.ImageMaxEntries, Depth: c.ImageMaxDepth}
}

func (c Config) imageDir() string       { return filepath.Join(c.StateRoot, "images") }
func (c Config) checkpointDir() string  { return filepath.Join(c.StateRoot, "cri") }
func (c Config) cniCacheDir() string    { return filepath.Join(c.StateRoot, "cni-cache") }
func (c Config) sandboxCkptDir() string { return filepath.Join(c.checkpointDir(), "sandboxes") }
func (c Config) containerCkptDir() string {
	return filepath.Join(c.checkpointDir(), "containers")
}

func (c Config) sandboxPath(id string) string {
	return filepath.Join(c.sandboxCkptDir(), id+".json")
}

func (c Config) containerPath(id string) string {
	return filepath.Join(c.containerCkptDir(), id+".json")
}
