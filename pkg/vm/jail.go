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
// and a uid of its own from uids, leased in UIDLeases until ReleaseJail.
// The pod's file servers get a second uid when its VM starts them
// (leaseFileServerUID). diskCap is Jail.DiskCap.
func LeaseJail(stateRoot string, uids jail.Range, l Layout, diskCap uint64) (Jail, error) {
	jailer, err := jail.LinkEmulator(filepath.Dir(JailerLink(stateRoot)))
	if err != nil {
		return Jail{}, fmt.Errorf("QEMU's jailer: %v: %w", err, errdefs.ErrInternal)
	}
	uid, err := jail.Allocate(UIDLeases(stateRoot), uids, l.Dir)
	if err != nil {
		return Jail{}, fmt.Errorf("a uid for QEMU: %v: %w", err, errdefs.ErrResourceExhausted)
	}
	return Jail{Jailer: jailer, UID: uid, GID: uid, Leases: UIDLeases(stateRoot), UIDs: uids, LibvirtRoot: l.Libvirt(), DiskCap: diskCap}, nil
}

// leaseFileServerUID leases the uid the file servers of the pod at l run
// as, from j's range, to l's FSDir (made for it: a lease whose owner is
// gone is stale), until releaseFileServerUID or ReleaseJail.
func leaseFileServerUID(j Jail, l Layout) (uint32, error) {
	if j.Leases == "" || j.UIDs.Count == 0 {
		return 0, fmt.Errorf("no uid range to lease the file servers' uid from: %w", errdefs.ErrInternal)
	}
	if err := os.MkdirAll(l.FSDir(), 0o700); err != nil {
		return 0, fmt.Errorf("the file servers' dir: %v: %w", err, errdefs.ErrInternal)
	}
	uid, err := jail.Allocate(j.Leases, j.UIDs, l.FSDir())
	if err != nil {
		return 0, fmt.Errorf("a uid for the pod's file servers: %v: %w", err, errdefs.ErrResourceExhausted)
	}
	return uid, nil
}

// releaseFileServerUID gives back the file servers' uid leased in leases
// to dir (a VM's FSDir), killing what still runs as it, and removes dir.
func releaseFileServerUID(leases, dir string) error {
	if leases != "" {
		if err := jail.Release(leases, dir); err != nil {
			return err
		}
	}
	return os.RemoveAll(dir)
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
