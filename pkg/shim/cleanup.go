package shim

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/log"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/vmpod/vmpod/pkg/jail"
	"github.com/vmpod/vmpod/pkg/podcgroup"
	"github.com/vmpod/vmpod/pkg/virt/libvirt"
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
		c = checkpoint{ID: id, PodDir: podDir, Kind: "vm", Domain: vmspec.DomainName(oci.Annotations[vmspec.CRISandboxNamespace], oci.Annotations[vmspec.CRISandboxName])}
		if oci.Linux != nil {
			c.Cgroup = oci.Linux.CgroupsPath
		}
	}
	var errs []error
	if c.Kind == "vm" {
		errs = append(errs, destroyDomain(ctx, cfg, podDir, c.Domain))
		if c.Tap != "" {
			errs = append(errs, removeTap(c.Netns, c.Tap, c.PodIf))
		}
		if c.Rootfs != "" {
			errs = append(errs, mount.UnmountAll(c.Rootfs, 0))
		}
		for _, d := range c.Devices {
			if err := os.Remove(d); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	// The VM's cgroup, or the one the dead shim entered for the sandbox.
	if c.Cgroup != "" {
		if p, err := podcgroup.Parse(c.Cgroup); err != nil {
			errs = append(errs, err)
		} else {
			errs = append(errs, podcgroup.Remove(p))
		}
	}
	errs = append(errs, removeCheckpoint(podDir, id))
	if len(remainingTasks(podDir)) == 0 {
		errs = append(errs, os.RemoveAll(podDir), jail.Release(cfg.uidLeases(), podDir))
	}
	err = errors.Join(errs...)
	if err != nil {
		log.G(ctx).WithError(err).Warn("cleanup after shim")
	}
	return err
}

// destroyDomain stops and removes the VM of a dead shim through a fresh
// embedded libvirt on the pod's root (libvirt re-attaches to its QEMU).
func destroyDomain(ctx context.Context, cfg Config, podDir, domain string) error {
	if _, err := os.Stat(podDir); err != nil {
		return nil
	}
	l := (&pod{dir: podDir}).layout()
	conn, err := libvirt.OpenEmbedded(ctx, l.Libvirt(), libvirt.EmbedOptions{CacheDir: cfg.CapsCache, NoCgroups: true})
	if err != nil {
		return fmt.Errorf("open the pod's libvirt: %w", err)
	}
	defer conn.Close()
	var errs []error
	if err := conn.Destroy(ctx, domain); err != nil && !isNotFound(err) {
		errs = append(errs, err)
	}
	if err := conn.Undefine(ctx, domain); err != nil && !isNotFound(err) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// removeTap deletes the tap (and with it its qdisc and filters) and the
// ingress qdisc on the pod interface, in the pod's namespace if it still
// exists; a namespace already gone took both with it.
func removeTap(nsPath, tap, podIf string) error {
	if nsPath == "" {
		return nil
	}
	ns, err := netns.GetFromPath(nsPath)
	if err != nil {
		return nil
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	if l, err := h.LinkByName(tap); err == nil {
		if err := h.LinkDel(l); err != nil {
			return fmt.Errorf("remove tap %s: %w", tap, err)
		}
	}
	if podIf == "" {
		return nil
	}
	l, err := h.LinkByName(podIf)
	if err != nil {
		return nil
	}
	qdiscs, err := h.QdiscList(l)
	if err != nil {
		return err
	}
	for _, q := range qdiscs {
		if q.Type() == "ingress" {
			if err := h.QdiscDel(q); err != nil {
				return fmt.Errorf("remove ingress qdisc of %s: %w", podIf, err)
			}
		}
	}
	return nil
}
