package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/vmpod/vmpod/pkg/host"
	"github.com/vmpod/vmpod/pkg/virt/libvirt"
)

// Options say where the node keeps what libvirt and the KVM probe share
// between processes.
type Options struct {
	// CapsCache is the node-wide warm copy of libvirt's QEMU capabilities.
	CapsCache string
	// KVMCache is the KVM probe's verdict (DefaultKVMCache if empty).
	KVMCache string
	// Pod opens a pod's libvirt: libvirt makes no cgroups, so QEMU stays
	// in the opener's (the pod's) cgroup until the runtime moves it.
	Pod bool
	// Jailer is the emulator a pod's domains name (vm.Jail.Jailer): its
	// capabilities are probed at open and shared through CapsCache, so only
	// the node's first pod pays for the probe.
	Jailer string
}

// Open opens libvirt's embedded QEMU driver on root, as every vmpod
// process does (the shim for a pod, the cleanup after a dead shim, the
// labeller and render for the node).
func Open(ctx context.Context, root string, o Options) (*libvirt.Conn, error) {
	opts := libvirt.EmbedOptions{CacheDir: o.CapsCache, NoCgroups: o.Pod}
	if o.Jailer != "" {
		opts.Emulators = []string{o.Jailer}
	}
	if o.CapsCache != "" && libvirt.ColdCache(o.CapsCache, opts.Emulators) {
		// A node's first pods, started together: one probes QEMU, the
		// others wait for it and take its results from the cache, rather
		// than each probing every QEMU binary for seconds at once.
		if err := os.MkdirAll(o.CapsCache, 0o755); err != nil {
			return nil, fmt.Errorf("capabilities cache: %w", err)
		}
		lock, err := os.OpenFile(filepath.Join(o.CapsCache, ".probe.lock"), os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, fmt.Errorf("capabilities cache: %w", err)
		}
		defer lock.Close()
		if err := flock(ctx, lock); err != nil {
			return nil, fmt.Errorf("capabilities cache: wait for another process's probe: %w", err)
		}
	}
	return libvirt.OpenEmbedded(ctx, root, opts)
}

// HostOf is what VMs run on through conn: libvirt's capabilities, less KVM
// where the probe's verdict (cached; probed again when QEMU, the kernel or
// /dev/kvm changed) says it does not work.
func HostOf(ctx context.Context, conn *libvirt.Conn, o Options) (host.Host, error) {
	kvm, err := CheckKVM(ctx, ProbeOptions{CacheFile: o.KVMCache})
	if err != nil {
		return host.Host{}, err
	}
	return Host(ctx, conn, kvm)
}
