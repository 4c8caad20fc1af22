package shim

import (
	"context"

	"github.com/containerd/log"

	"github.com/vmpod/vmpod/pkg/nodeclient"
	"github.com/vmpod/vmpod/pkg/ocikeys"
	"github.com/vmpod/vmpod/pkg/podcgroup"
)

// cleanupAfterShim is the `delete` command's work for task id, whose shim
// is gone: the node daemon removes the VM (stopping it hard if it still
// runs) and all it holds, or, for the sandbox, releases the pod; the
// sandbox's cgroup, which the dead shim had entered, is removed
// (cgroupfs; a systemd scope went with the shim). What is gone already is
// no error: it runs after a shim that deleted its task itself too.
func cleanupAfterShim(ctx context.Context, cfg Config, bundle, id string) error {
	oci, err := readBundleSpec(bundle)
	if err != nil {
		return err
	}
	nc := nodeclient.New(cfg.Socket)
	defer nc.Close()
	if oci.Annotations[ocikeys.CRIContainerType] != ocikeys.CRIContainerTypeSbx {
		sandbox := oci.Annotations[ocikeys.CRISandboxID]
		return removeVM(ctx, nc, id, sandbox == "" || sandbox == id)
	}
	if err := nc.ReleasePod(ctx, id); err != nil {
		return err
	}
	if oci.Linux != nil && oci.Linux.CgroupsPath != "" {
		if p, err := podcgroup.Parse(oci.Linux.CgroupsPath); err == nil && p.Driver != podcgroup.Systemd {
			if err := podcgroup.Remove(p); err != nil {
				log.G(ctx).WithError(err).Warn("remove the sandbox's cgroup")
			}
		}
	}
	return nil
}
