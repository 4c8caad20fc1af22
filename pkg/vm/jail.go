package vm

import (
	"fmt"
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
// diskCap is Jail.DiskCap.
func LeaseJail(stateRoot string, uids jail.Range, l Layout, diskCap uint64) (Jail, error) {
	jailer, err := jail.LinkEmulator(filepath.Dir(JailerLink(stateRoot)))
	if err != nil {
		return Jail{}, fmt.Errorf("QEMU's jailer: %v: %w", err, errdefs.ErrInternal)
	}
	uid, err := jail.Allocate(UIDLeases(stateRoot), uids, l.Dir)
	if err != nil {
		return Jail{}, fmt.Errorf("a uid for QEMU: %v: %w", err, errdefs.ErrResourceExhausted)
	}
	return Jail{Jailer: jailer, UID: uid, GID: uid, LibvirtRoot: l.Libvirt(), DiskCap: diskCap}, nil
}

// ReleaseJail gives back the uid LeaseJail leased for the pod at l, once
// no process runs as it (jail.Release kills what is left first).
func ReleaseJail(stateRoot string, l Layout) error {
	return jail.Release(UIDLeases(stateRoot), l.Dir)
}

// KillOrphans kills what still runs as the uid of the pod at l (a QEMU
// the hypervisor lost track of), keeping the lease: the runtime calls it
// on a VM it recovers but could not take over, before the pod's next
// QEMU runs as that uid.
func KillOrphans(stateRoot string, l Layout) error {
	return jail.KillOrphans(UIDLeases(stateRoot), l.Dir)
}
