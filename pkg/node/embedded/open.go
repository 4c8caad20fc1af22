// Package embedded opens libvirt's embedded QEMU driver the way every
// vmpod process that holds libvirt does: the node daemon, vm-runtime cri,
// the labeller and render.
//
// It may import pkg/node, pkg/virt/libvirt and the standard library. It
// links libvirt (cgo): the shim must not import it.
package embedded

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/vmpod/vmpod/pkg/node"
	"github.com/vmpod/vmpod/pkg/virt/libvirt"
)

// Open opens libvirt's embedded QEMU driver on root, as every vmpod
// process does.
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
		if len(o.ProbeArgv) > 0 && libvirt.ColdCache(o.CapsCache, opts.Emulators) {
			// Not the caller's deadline: a probe cut short would leave the
			// cache cold for the next one to start over (as libvirt's own
			// probe in this process could not be cut short either).
			pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), probeTimeout)
			defer cancel()
			cmd := exec.CommandContext(pctx, o.ProbeArgv[0], append(o.ProbeArgv[1:], "--cache", o.CapsCache, "--jailer", o.Jailer)...)
			if out, err := cmd.CombinedOutput(); err != nil {
				return nil, fmt.Errorf("probe QEMU's capabilities (%s): %v: %s", strings.Join(cmd.Args, " "), err, out)
			}
		}
	}
	return libvirt.OpenEmbedded(ctx, root, opts)
}

// probeTimeout bounds vm-runtime caps-probe: libvirt probes each QEMU
// binary of the node for a few seconds, a minute on a busy 2-core node.
const probeTimeout = 5 * time.Minute

// Probe fills the capabilities cache dir with what libvirt probes of
// QEMU and of jailer, through an embedded driver on a root of its own,
// removed after: the work of vm-runtime caps-probe (node.Options.ProbeArgv).
// The caller holds the cache's probe lock.
func Probe(ctx context.Context, dir, jailer string) error {
	root, err := os.MkdirTemp("", "vmpod-caps-probe-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	opts := libvirt.EmbedOptions{CacheDir: dir, NoCgroups: true}
	if jailer != "" {
		opts.Emulators = []string{jailer}
	}
	c, err := libvirt.OpenEmbedded(ctx, filepath.Join(root, "libvirt"), opts)
	if err != nil {
		return err
	}
	return c.Close()
}
