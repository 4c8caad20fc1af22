package vm

import (
	"context"
	"errors"
	"os"

	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/errdefs"

	"github.com/vmpod/vmpod/pkg/podcgroup"
	"github.com/vmpod/vmpod/pkg/podnet"
	"github.com/vmpod/vmpod/pkg/virt"
)

// Held is what a VM holds on the node outside its state dir: each thing
// Undo removes. A front door records it in its checkpoint as it acquires
// each, so that the undo can run again from the record after the process
// that made the VM died.
type Held struct {
	// Domain is the libvirt domain's name.
	Domain string `json:"domain,omitempty"`
	// Netns is the pod's network namespace; Tap the guest's tap in it and
	// PodIf the pod interface the tap was joined to (podnet).
	Netns string `json:"netns,omitempty"`
	Tap   string `json:"tap,omitempty"`
	PodIf string `json:"podIf,omitempty"`
	// NodeTap is the guest's tap while it is in the node's network
	// namespace, where it is made and libvirt opens it, before Start
	// moves it into the pod's (Tap then; both while it moves).
	NodeTap string `json:"nodeTap,omitempty"`
	// Rootfs is where the runtime mounted the image.
	Rootfs string `json:"rootfs,omitempty"`
	// Devices are the block volume nodes the runtime made.
	Devices []string `json:"devices,omitempty"`
	// Cgroup is QEMU's cgroup (a cgroupsPath, podcgroup.Parse).
	Cgroup string `json:"cgroup,omitempty"`
	// FileServerLeases is the dir of uid leases the VM's virtio-fs file
	// servers' uid is leased in (Jail.Leases) and FileServerDir the
	// lease's owner, the VM's FSDir, both set before the lease is taken;
	// FileServers is that uid and FileServerCgroup their cgroup, a
	// sibling of QEMU's under the pod's, set before the first server
	// starts.
	FileServerLeases string `json:"fileServerLeases,omitempty"`
	FileServerDir    string `json:"fileServerDir,omitempty"`
	FileServers      uint32 `json:"fileServers,omitempty"`
	FileServerCgroup string `json:"fileServerCgroup,omitempty"`
}

// Empty says h holds nothing Undo would remove (a namespace alone is the
// pod's, not the VM's).
func (h Held) Empty() bool {
	return h.Domain == "" && h.Tap == "" && h.NodeTap == "" && h.Rootfs == "" && len(h.Devices) == 0 && h.Cgroup == "" &&
		h.FileServerLeases == "" && h.FileServerDir == "" && h.FileServers == 0 && h.FileServerCgroup == ""
}

// Undo removes what h holds, in the reverse order of its making: the
// domain (QEMU stopped hard, the definition removed) through hv, the
// file servers (every process of their uid killed) and their cgroup,
// QEMU's cgroup, the device nodes, the tap and its filters, the image mount.
// What is already gone is no error; a failure does not stop the rest.
// The normal teardown and the cleanup after a dead front door both end
// here; the first has closed its in-process parts (console, DHCP server)
// before. hv may be nil when h names no domain.
func Undo(ctx context.Context, hv virt.Hypervisor, h Held) error {
	var errs []error
	if h.Domain != "" {
		if hv == nil {
			errs = append(errs, errors.New("undo: a domain but no hypervisor connection"))
		} else {
			if err := hv.Destroy(ctx, h.Domain); err != nil && !errdefs.IsNotFound(err) {
				errs = append(errs, err)
			}
			if err := hv.Undefine(ctx, h.Domain); err != nil && !errdefs.IsNotFound(err) {
				errs = append(errs, err)
			}
		}
	}
	if h.FileServerDir != "" {
		// Each file server ends by itself once QEMU is gone; one a dead
		// front door left, or one QEMU never connected to, does not: the
		// release kills what runs as the uid before it gives it back.
		errs = append(errs, releaseFileServerUID(h.FileServerLeases, h.FileServerDir))
	}
	for _, cg := range []string{h.FileServerCgroup, h.Cgroup} {
		if cg == "" {
			continue
		}
		if p, err := podcgroup.Parse(cg); err != nil {
			errs = append(errs, err)
		} else {
			errs = append(errs, podcgroup.Remove(p))
		}
	}
	for _, d := range h.Devices {
		if err := os.Remove(d); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if h.Tap != "" {
		errs = append(errs, podnet.Detach(h.Netns, h.Tap, h.PodIf))
	}
	if h.NodeTap != "" {
		// Undo runs in the node's namespace, as every caller of pkg/vm.
		errs = append(errs, podnet.DeleteTap(h.NodeTap))
	}
	if h.Rootfs != "" {
		errs = append(errs, mount.UnmountAll(h.Rootfs, 0))
	}
	return errors.Join(errs...)
}
