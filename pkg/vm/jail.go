package vm

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/vmpod/vmpod/pkg/jail"
	"github.com/vmpod/vmpod/pkg/podcgroup"
)

// jailCgroup is the jail's form of QEMU's cgroup at p with these limits.
func jailCgroup(p podcgroup.Path, memoryBytes uint64, cpu *specs.LinuxCPU) *jail.Cgroup {
	c := &jail.Cgroup{Path: p.Raw, MemoryBytes: memoryBytes}
	if cpu != nil {
		c.CPUShares, c.CPUQuota, c.CPUPeriod = cpu.Shares, cpu.Quota, cpu.Period
	}
	return c
}

// LeaseJail is the jail of the QEMU of the pod laid out at l, for a
// runtime with this state root: the jailer linked under it (JailerLink)
// and a uid of its own from uids, leased in UIDLeases until ReleaseJail;
// and a second uid for the pod's file servers (Jail.FSUID), leased to the
// pod's FSDir. diskCap is Jail.DiskCap.
func LeaseJail(stateRoot string, uids jail.Range, l Layout, diskCap uint64) (Jail, error) {
	jailer, err := jail.LinkEmulator(filepath.Dir(JailerLink(stateRoot)))
	if err != nil {
		return Jail{}, fmt.Errorf("QEMU's jailer: %v: %w", err, errdefs.ErrInternal)
	}
	uid, err := jail.Allocate(UIDLeases(stateRoot), uids, l.Dir)
	if err != nil {
		return Jail{}, fmt.Errorf("a uid for QEMU: %v: %w", err, errdefs.ErrResourceExhausted)
	}
	// The lease's owner must exist for as long as the lease holds
	// (jail.Allocate takes over the lease of an owner that is gone).
	if err := os.MkdirAll(l.FSDir(), 0o700); err != nil {
		return Jail{}, fmt.Errorf("the file servers' dir: %v: %w", err, errdefs.ErrInternal)
	}
	fsUID, err := jail.Allocate(UIDLeases(stateRoot), uids, l.FSDir())
	if err != nil {
		return Jail{}, fmt.Errorf("a uid for the pod's file servers: %v: %w", err, errdefs.ErrResourceExhausted)
	}
	return Jail{Jailer: jailer, UID: uid, GID: uid, FSUID: fsUID, LibvirtRoot: l.Libvirt(), DiskCap: diskCap}, nil
}

// ReleaseJail gives back the uids LeaseJail leased for the pod at l, once
// no process runs as them (jail.Release kills what is left first).
func ReleaseJail(stateRoot string, l Layout) error {
	return errors.Join(jail.Release(UIDLeases(stateRoot), l.FSDir()), jail.Release(UIDLeases(stateRoot), l.Dir))
}

// KillOrphans kills what still runs as the uids of the pod at l (a QEMU
// the hypervisor lost track of, its file servers), keeping the leases:
// the runtime calls it on a VM it recovers but could not take over,
// before the pod's next QEMU runs as that uid.
func KillOrphans(stateRoot string, l Layout) error {
	return errors.Join(jail.KillOrphans(UIDLeases(stateRoot), l.FSDir()), jail.KillOrphans(UIDLeases(stateRoot), l.Dir))
}
