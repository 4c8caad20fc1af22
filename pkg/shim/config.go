package shim

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/vmpod/vmpod/pkg/jail"
	"github.com/vmpod/vmpod/pkg/node"
	"github.com/vmpod/vmpod/pkg/virt/remote"
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
	// Helper is the libvirt helper (vm-runtime, run as `vm-runtime
	// hypervisor`) the shim starts when it needs libvirt, since it links
	// none ($VMPOD_LIBVIRT_HELPER; default: vm-runtime next to the shim's
	// own executable, else on PATH).
	Helper string
	// HelperIdle is how long a helper stays after its last call
	// ($VMPOD_LIBVIRT_HELPER_IDLE, a duration; remote.DefaultIdle).
	HelperIdle time.Duration
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
		Helper:    os.Getenv("VMPOD_LIBVIRT_HELPER"),
	}
	if v := os.Getenv("VMPOD_LIBVIRT_HELPER_IDLE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return Config{}, fmt.Errorf("VMPOD_LIBVIRT_HELPER_IDLE %q: want a positive duration such as 5s", v)
		}
		c.HelperIdle = d
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

// nodeOptions open a pod's libvirt.
func (c Config) nodeOptions() node.Options {
	return node.Options{CapsCache: c.CapsCache, KVMCache: c.KVMCache, Pod: true}
}

// openHypervisor opens the pod's libvirt root (o.Pod) through helpers
// started on demand (pkg/virt/remote), in this process's network
// namespace and cgroup, which QEMU inherits from them.
func (c Config) openHypervisor(ctx context.Context, root string, o node.Options) (*remote.Client, error) {
	helper, err := c.helperPath()
	if err != nil {
		return nil, err
	}
	args := o.HelperArgs(root)
	return remote.Open(ctx, remote.Options{Idle: c.HelperIdle, Spawn: remote.Exec(func() *exec.Cmd {
		cmd := exec.Command(helper, args...)
		// What libvirt and the helper say goes to the shim's log.
		cmd.Stderr = &lineLogger{}
		// libvirt's threads each take a malloc arena: one for all of them.
		cmd.Env = append(os.Environ(), "MALLOC_ARENA_MAX=1")
		return cmd
	})})
}

// helperPath finds the libvirt helper.
func (c Config) helperPath() (string, error) {
	if c.Helper != "" {
		return c.Helper, nil
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), helperName)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	p, err := exec.LookPath(helperName)
	if err != nil {
		return "", fmt.Errorf("the shim starts %s (the libvirt helper) to run VMs: not next to the shim, not on PATH, and $VMPOD_LIBVIRT_HELPER is not set: %w", helperName, errdefs.ErrFailedPrecondition)
	}
	return p, nil
}

// helperName is the libvirt helper's binary.
const helperName = "vm-runtime"

// lineLogger logs each line written to it, as the libvirt helper's.
type lineLogger struct{ partial []byte }

func (l *lineLogger) Write(p []byte) (int, error) {
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		log.L.WithField("from", "libvirt helper").Warn(string(l.partial[:i]))
		l.partial = l.partial[i+1:]
	}
	if len(l.partial) > 4096 { // a line without end: log what came
		log.L.WithField("from", "libvirt helper").Warn(string(l.partial))
		l.partial = l.partial[:0]
	}
	return len(p), nil
}
