package shim

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/containerd/log"

	"github.com/vmpod/vmpod/pkg/virt"
	"github.com/vmpod/vmpod/pkg/virt/remote"
	"github.com/vmpod/vmpod/pkg/vm"
	"github.com/vmpod/vmpod/pkg/vmspec"
)

// cleanupAfterShim is the `delete` command's work for task id: whatever its
// checkpoint says the task still holds (a VM's domain and QEMU, tap, tc
// rules, rootfs mount, device nodes, cgroup; a sandbox's state dir) is
// removed. It runs after every task delete too, when there is nothing left
// to do. Errors are logged and the cleanup goes on: a half-done cleanup
// beats a stopped one.
func cleanupAfterShim(ctx context.Context, cfg Config, bundle, id string) error {
	oci, err := readBundleSpec(bundle)
	if err != nil {
		return err
	}
	sandbox := oci.Annotations[vmspec.CRISandboxID]
	if sandbox == "" {
		sandbox = id
	}
	podDir := cfg.podDir(sandbox)
	c, err := loadCheckpoint(podDir, id)
	if errors.Is(err, os.ErrNotExist) {
		return nil // the shim deleted the task itself
	}
	if err != nil {
		log.G(ctx).WithError(err).Warn("unreadable checkpoint; removing what can be found")
		c = checkpoint{ID: id, PodDir: podDir, Kind: "vm"}
		c.Domain = vmspec.DomainName(oci.Annotations[vmspec.CRISandboxNamespace], oci.Annotations[vmspec.CRISandboxName])
		if oci.Linux != nil {
			c.Cgroup = oci.Linux.CgroupsPath
		}
	}
	var errs []error
	var hv virt.Hypervisor
	if c.Domain != "" {
		conn, err := openPodLibvirt(ctx, cfg, podDir)
		if err != nil {
			errs = append(errs, err)
			c.Domain = "" // the rest is undone all the same
		} else if conn != nil {
			defer conn.Close()
			hv = conn
		} else {
			c.Domain = "" // the pod's dir, and its libvirt, are gone
		}
	}
	errs = append(errs, vm.Undo(ctx, hv, c.Held))
	errs = append(errs, removeCheckpoint(podDir, id))
	if len(remainingTasks(podDir)) == 0 {
		errs = append(errs, os.RemoveAll(podDir), vm.ReleaseJail(cfg.StateRoot, vm.Layout{Dir: podDir}))
	}
	err = errors.Join(errs...)
	if err != nil {
		log.G(ctx).WithError(err).Warn("cleanup after shim")
	}
	return err
}

// openPodLibvirt opens the pod's libvirt root through a helper, which
// re-attaches to the QEMU a dead shim left; nil if the pod's dir is gone.
func openPodLibvirt(ctx context.Context, cfg Config, podDir string) (*remote.Client, error) {
	if _, err := os.Stat(podDir); err != nil {
		return nil, nil
	}
	l := vm.Layout{Dir: podDir}
	conn, err := cfg.openHypervisor(ctx, l.Libvirt(), cfg.nodeOptions())
	if err != nil {
		return nil, fmt.Errorf("open the pod's libvirt: %w", err)
	}
	return conn, nil
}
