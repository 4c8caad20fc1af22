package podcgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/cgroups/v3"
	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// Root is where cgroup hierarchies are mounted.
const Root = "/sys/fs/cgroup"

// Unified reports whether the node runs cgroup v2 only. A hybrid node
// (v1 controllers, an empty v2 hierarchy) counts as v1.
func Unified() bool { return cgroups.Mode() == cgroups.Unified }

// Limits are what a cgroup made by Enter enforces.
type Limits struct {
	// MemoryBytes is the memory limit; 0 for none.
	MemoryBytes uint64
	// CPU carries shares (weight on v2), quota and period; nil for none.
	// A cpuset is ignored: it would pin QEMU's own threads with the vCPUs.
	CPU *specs.LinuxCPU
}

func (l Limits) resources() *specs.LinuxResources {
	r := &specs.LinuxResources{}
	if c := l.CPU; c != nil {
		r.CPU = &specs.LinuxCPU{Shares: c.Shares, Quota: c.Quota, Period: c.Period}
	}
	if l.MemoryBytes > 0 {
		m := int64(min(l.MemoryBytes, 1<<62))
		r.Memory = &specs.LinuxMemory{Limit: &m}
	}
	return r
}

// Cgroup is a cgroup that holds some of a pod's processes.
type Cgroup struct {
	path Path
	v1   cgroup1.Cgroup   // cgroup v1
	v2   *cgroup2.Manager // cgroup v2
}

// Path is where the cgroup is.
func (c *Cgroup) Path() Path { return c.path }

// Enter makes the cgroup at p with limits l (or takes the one that is
// there and applies l) and moves pid, all its threads, into it. With the
// systemd driver the scope is made with pid in it; a scope of that name
// that exists already is an error.
func Enter(p Path, pid int, l Limits) (*Cgroup, error) {
	fail := func(err error) (*Cgroup, error) {
		return nil, fmt.Errorf("cgroup %s (%s driver, cgroup %s): %v: %w", p, p.Driver, version(), err, errdefs.ErrInternal)
	}
	if p.Driver == Systemd {
		if err := startScope(p, pid, l); err != nil {
			return fail(err)
		}
		c, err := load(p)
		if err != nil {
			return fail(err)
		}
		if err := c.checkMemory(l.MemoryBytes); err != nil {
			_ = stopScope(p.Unit)
			return fail(err)
		}
		return c, nil
	}
	if Unified() {
		m, err := cgroup2.NewManager(Root, p.Dir, cgroup2.ToResources(l.resources()))
		if err != nil {
			return fail(err)
		}
		if err := m.AddProc(uint64(pid)); err != nil {
			return fail(err)
		}
		return &Cgroup{path: p, v2: m}, nil
	}
	cg, err := cgroup1.New(cgroup1.StaticPath(p.Dir), l.resources())
	if err != nil {
		return fail(err)
	}
	if err := cg.AddProc(uint64(pid)); err != nil {
		return fail(err)
	}
	return &Cgroup{path: p, v1: cg}, nil
}

// Load takes the cgroup at p as it is (after a restart).
func Load(p Path) (*Cgroup, error) {
	c, err := load(p)
	if err != nil {
		return nil, fmt.Errorf("cgroup %s: %v: %w", p, err, errdefs.ErrNotFound)
	}
	return c, nil
}

func load(p Path) (*Cgroup, error) {
	if Unified() {
		m, err := cgroup2.Load(p.Dir)
		if err != nil {
			return nil, err
		}
		if _, err := os.Stat(filepath.Join(Root, p.Dir)); err != nil {
			return nil, err
		}
		return &Cgroup{path: p, v2: m}, nil
	}
	cg, err := cgroup1.Load(cgroup1.StaticPath(p.Dir))
	if err != nil {
		return nil, err
	}
	return &Cgroup{path: p, v1: cg}, nil
}

func version() string {
	if Unified() {
		return "v2"
	}
	return "v1"
}

// checkMemory verifies that the kernel enforces the limit systemd was
// asked for, so a VM never runs with less than it was promised or without
// a limit.
func (c *Cgroup) checkMemory(want uint64) error {
	if want == 0 {
		return nil
	}
	got := MemoryLimit(c.path.Dir)
	if got != want {
		return fmt.Errorf("memory limit is %d after systemd made the scope, want %d", got, want)
	}
	return nil
}

// UpdateCPU changes shares (weight) and quota live.
func (c *Cgroup) UpdateCPU(cpu *specs.LinuxCPU) error {
	res := Limits{CPU: cpu}.resources()
	var err error
	switch {
	case c.path.Driver == Systemd:
		err = setScopeCPU(c.path.Unit, cpu)
	case c.v2 != nil:
		err = c.v2.Update(cgroup2.ToResources(res))
	default:
		err = c.v1.Update(res)
	}
	if err != nil {
		return fmt.Errorf("update cgroup %s: %v: %w", c.path, err, errdefs.ErrInternal)
	}
	return nil
}

// UpdateMemory changes the memory limit live (a live resize of the VM).
// The kernel refuses a limit below what the cgroup uses and cannot
// reclaim; the caller never lowers it below what the guest holds.
func (c *Cgroup) UpdateMemory(bytes uint64) error {
	if bytes == 0 {
		return fmt.Errorf("update cgroup %s: a memory limit of 0: %w", c.path, errdefs.ErrInvalidArgument)
	}
	res := Limits{MemoryBytes: bytes}.resources()
	var err error
	switch {
	case c.path.Driver == Systemd:
		err = setScopeMemory(c.path.Unit, bytes)
	case c.v2 != nil:
		err = c.v2.Update(cgroup2.ToResources(res))
	default:
		err = c.v1.Update(res)
	}
	if err == nil {
		err = c.checkMemory(bytes)
	}
	if err != nil {
		return fmt.Errorf("update cgroup %s: memory limit %d: %v: %w", c.path, bytes, err, errdefs.ErrInternal)
	}
	return nil
}

// Stats are the cgroup's counters: containerd's cgroup1 or cgroup2 stats
// Metrics (both protobuf messages containerd's CRI plugin understands).
func (c *Cgroup) Stats() (any, error) {
	var (
		m   any
		err error
	)
	if c.v2 != nil {
		m, err = c.v2.Stat()
	} else {
		m, err = c.v1.Stat(cgroup1.IgnoreNotExist)
	}
	if err != nil {
		return nil, fmt.Errorf("cgroup %s stats: %v: %w", c.path, err, errdefs.ErrInternal)
	}
	return m, nil
}

// MemoryUsage is the memory charged to the cgroup now (v1
// memory.usage_in_bytes, v2 memory.current); 0 if it cannot be read.
func (c *Cgroup) MemoryUsage() uint64 {
	file := filepath.Join(Root, "memory", c.path.Dir, "memory.usage_in_bytes")
	if c.v2 != nil {
		file = filepath.Join(Root, c.path.Dir, "memory.current")
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	v, _ := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	return v
}

// OOMKilled reports whether the kernel's OOM killer killed a process of
// the cgroup (v1 memory.oom_control, v2 memory.events oom_kill).
func (c *Cgroup) OOMKilled() bool {
	if c.v2 != nil {
		n, err := readKeyed(filepath.Join(Root, c.path.Dir, "memory.events"), "oom_kill")
		return err == nil && n > 0
	}
	m, err := c.v1.Stat(cgroup1.IgnoreNotExist)
	return err == nil && m.MemoryOomControl != nil && m.MemoryOomControl.OomKill > 0
}

// Delete removes the cgroup; its processes must be gone (QEMU stopped). A
// systemd scope is stopped, which systemd then removes.
func (c *Cgroup) Delete() error {
	if err := Remove(c.path); err != nil {
		return fmt.Errorf("remove cgroup %s: %w", c.path, err)
	}
	return nil
}

// Remove deletes the cgroup at p if it is there (the cleanup after a dead
// shim, which has no Cgroup).
func Remove(p Path) error {
	if p.Driver == Systemd {
		return stopScope(p.Unit)
	}
	if Unified() {
		err := os.Remove(filepath.Join(Root, p.Dir))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	// v1: the directory in every hierarchy it is in, each on its own (a
	// cgroup half removed before, or made by someone else in fewer
	// hierarchies, still goes), retrying briefly while the memory
	// controller lets go of a task that just exited (EBUSY).
	dirs, err := filepath.Glob(filepath.Join(Root, "*", p.Dir))
	if err != nil {
		return err
	}
	var errs []error
	for _, d := range dirs {
		errs = append(errs, rmdirRetry(d))
	}
	return errors.Join(errs...)
}

// rmdirRetry removes an empty cgroup directory, retrying EBUSY for up to 2 s.
func rmdirRetry(dir string) error {
	deadline := time.Now().Add(2 * time.Second)
	for {
		err := unix.Rmdir(dir)
		switch {
		case err == nil, errors.Is(err, unix.ENOENT):
			return nil
		case errors.Is(err, unix.EBUSY) && time.Now().Before(deadline):
			time.Sleep(20 * time.Millisecond)
		default:
			return fmt.Errorf("rmdir %s: %w", dir, err)
		}
	}
}

// Leave moves pid out of the pod's cgroups into the root cgroup and
// removes the cgroupfs cgroup at p: a shim that entered its sandbox's
// cgroup calls it when it exits, so no empty cgroup outlives it (a systemd
// scope goes with its last process by itself).
func Leave(p Path, pid int) error {
	if p.Driver == Systemd {
		return nil
	}
	if Unified() {
		if err := os.WriteFile(filepath.Join(Root, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
			return fmt.Errorf("leave cgroup %s: %w", p, err)
		}
	} else {
		root, err := cgroup1.Load(cgroup1.RootPath)
		if err != nil {
			return fmt.Errorf("leave cgroup %s: %w", p, err)
		}
		if err := root.AddProc(uint64(pid)); err != nil {
			return fmt.Errorf("leave cgroup %s: %w", p, err)
		}
	}
	return Remove(p)
}

// MemoryLimit reads the memory limit of the cgroup dir (as in Path.Dir);
// 0 when it has none or does not exist.
func MemoryLimit(dir string) uint64 {
	file := filepath.Join(Root, "memory", dir, "memory.limit_in_bytes")
	if Unified() {
		file = filepath.Join(Root, dir, "memory.max")
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || v >= 1<<62 { // "max", or v1's page-rounded "unlimited"
		return 0
	}
	return v
}

// readKeyed reads one "key value" line of a flat keyed file.
func readKeyed(file, key string) (uint64, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+" "); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("%s: no %s", file, key)
}
