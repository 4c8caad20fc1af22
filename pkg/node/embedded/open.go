// Package embedded opens libvirt's embedded QEMU driver the way every
// vmpod process that holds libvirt does: a pod's helper (vm-runtime
// hypervisor, which the pod's shim starts on demand), the cleanup after a
// dead shim, vm-runtime cri for its node, the labeller and render.
//
// It may import pkg/node, pkg/virt/libvirt and the standard library. It
// links libvirt (cgo): the shim must not import it.
package embedded

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/vmpod/vmpod/pkg/node"
	"github.com/vmpod/vmpod/pkg/virt/libvirt"
)

// Open opens libvirt's embedded QEMU driver on root, as every vmpod
// process does (the shim for a pod, the cleanup after a dead shim, the
// labeller and render for the node).
func Open(ctx context.Context, root string, o node.Options) (*libvirt.Conn, error) {
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
		if err := node.Flock(ctx, lock); err != nil {
			return nil, fmt.Errorf("capabilities cache: wait for another process's probe: %w", err)
		}
	}
	return libvirt.OpenEmbedded(ctx, root, opts)
}
