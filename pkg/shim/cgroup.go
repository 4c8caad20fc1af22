package shim

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/containerd/cgroups/v3"
	"github.com/containerd/cgroups/v3/cgroup1"
	v1 "github.com/containerd/cgroups/v3/cgroup1/stats"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// podCgroup is the pod-level cgroup of a sandbox: the parent of the
// sandbox's cgroupsPath (.../kubepods/<qos>/pod<uid>/<sandbox id>), the
// cgroup whose limit the kubelet sets to the pod's limits plus the
// RuntimeClass overhead. "" when the spec names none, or names it in the
// systemd driver's slice:prefix:name form, which vmpod does not handle yet.
func podCgroup(s *specs.Spec) string {
	if s.Linux == nil || s.Linux.CgroupsPath == "" {
		return ""
	}
	p := s.Linux.CgroupsPath
	if !strings.HasPrefix(p, "/") {
		log.L.Warnf("cgroupsPath %q: only the cgroupfs driver is supported; QEMU stays in the shim's cgroup", p)
		return ""
	}
	return path.Dir(p)
}

func requireV1() error {
	if cgroups.Mode() == cgroups.Unified {
		return fmt.Errorf("cgroup v2 hosts are not supported yet: %w", errdefs.ErrNotImplemented)
	}
	return nil
}

// joinCgroup moves pid (all its threads) into the cgroup at p in every v1
// hierarchy, creating it if the kubelet has not.
func joinCgroup(p string, pid int) error {
	if err := requireV1(); err != nil {
		return err
	}
	cg, err := cgroup1.Load(cgroup1.StaticPath(p))
	if errors.Is(err, cgroup1.ErrCgroupDeleted) || errors.Is(err, os.ErrNotExist) {
		cg, err = cgroup1.New(cgroup1.StaticPath(p), &specs.LinuxResources{})
	}
	if err != nil {
		return fmt.Errorf("cgroup %s: %v: %w", p, err, errdefs.ErrInternal)
	}
	if err := cg.AddProc(uint64(pid)); err != nil {
		return fmt.Errorf("join cgroup %s: %v: %w", p, err, errdefs.ErrInternal)
	}
	return nil
}

// vmCgroup is the VM container's own cgroup, under the pod's: QEMU runs in
// it with a memory limit of guest RAM plus the VM's overhead, and its
// counters are the task's stats.
type vmCgroup struct {
	path string
	cg   cgroup1.Cgroup
}

// newVMCgroup creates the cgroup with a memory limit (0: none) and the
// container's CPU shares and quota (nil: none): a pod limited to 1.5 CPUs
// gets 2 vCPUs that together run for at most 1.5 CPUs.
func newVMCgroup(p string, memoryLimit uint64, cpu *specs.LinuxCPU) (*vmCgroup, error) {
	if err := requireV1(); err != nil {
		return nil, err
	}
	res := &specs.LinuxResources{CPU: cpuOnly(cpu)}
	if memoryLimit > 0 {
		l := int64(memoryLimit)
		res.Memory = &specs.LinuxMemory{Limit: &l}
	}
	cg, err := cgroup1.New(cgroup1.StaticPath(p), res)
	if err != nil {
		return nil, fmt.Errorf("VM cgroup %s: %v: %w", p, err, errdefs.ErrInternal)
	}
	return &vmCgroup{path: p, cg: cg}, nil
}

// cpuOnly keeps the CPU settings a VM's cgroup takes: shares, quota and
// period. A cpuset would pin QEMU's emulator threads with the vCPUs.
func cpuOnly(cpu *specs.LinuxCPU) *specs.LinuxCPU {
	if cpu == nil {
		return nil
	}
	return &specs.LinuxCPU{Shares: cpu.Shares, Quota: cpu.Quota, Period: cpu.Period}
}

// updateCPU applies new CPU shares and quota live.
func (c *vmCgroup) updateCPU(cpu *specs.LinuxCPU) error {
	if err := c.cg.Update(&specs.LinuxResources{CPU: cpuOnly(cpu)}); err != nil {
		return fmt.Errorf("update VM cgroup %s: %v: %w", c.path, err, errdefs.ErrInternal)
	}
	return nil
}

func (c *vmCgroup) add(pid int) error {
	if err := c.cg.AddProc(uint64(pid)); err != nil {
		return fmt.Errorf("move QEMU %d into %s: %v: %w", pid, c.path, err, errdefs.ErrInternal)
	}
	return nil
}

func (c *vmCgroup) stat() (*v1.Metrics, error) {
	m, err := c.cg.Stat(cgroup1.IgnoreNotExist)
	if err != nil {
		return nil, fmt.Errorf("VM cgroup stats: %v: %w", err, errdefs.ErrInternal)
	}
	return m, nil
}

// oomKilled reports whether the kernel's OOM killer acted in the cgroup.
func (c *vmCgroup) oomKilled() bool {
	m, err := c.cg.Stat(cgroup1.IgnoreNotExist)
	return err == nil && m.MemoryOomControl != nil && m.MemoryOomControl.OomKill > 0
}

// remove deletes the cgroup; it must be empty (QEMU gone).
func (c *vmCgroup) remove() error {
	if err := c.cg.Delete(); err != nil && !errors.Is(err, cgroup1.ErrCgroupDeleted) {
		return fmt.Errorf("remove VM cgroup %s: %w", c.path, err)
	}
	return nil
}

// memoryLimit reads the memory limit of the cgroup at p in the v1 memory
// hierarchy; 0 when it has none (the kernel's "unlimited" is a huge number)
// or the cgroup does not exist.
func memoryLimit(p string) uint64 {
	b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/memory", p, "memory.limit_in_bytes"))
	if err != nil {
		return 0
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || v >= 1<<62 {
		return 0
	}
	return v
}

// removeCgroupPath deletes a cgroup by path if it exists (the delete
// command's cleanup after a dead shim).
func removeCgroupPath(p string) error {
	cg, err := cgroup1.Load(cgroup1.StaticPath(p))
	if err != nil {
		return nil // gone already
	}
	return cg.Delete()
}
