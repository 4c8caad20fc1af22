package vm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/containerd/errdefs"

	"github.com/vmpod/vmpod/pkg/convert"
	"github.com/vmpod/vmpod/pkg/host"
	"github.com/vmpod/vmpod/pkg/virt"
	"github.com/vmpod/vmpod/pkg/vmspec"
)

// Config is everything needed to create one VM.
type Config struct {
	Spec   vmspec.Spec
	Host   host.Host
	Image  Image
	Layout Layout
	// NICs and Volumes are the taps and block devices the runtime made,
	// by vmspec.NIC and vmspec.Volume name.
	NICs    map[string]convert.NIC
	Volumes map[string]string
	// MemoryLimit caps QEMU's memory (guest RAM plus overhead) in bytes
	// through libvirt, applied live after a paused start; 0 sets none. A
	// runtime that manages QEMU's cgroup itself uses Start's prepare hook.
	MemoryLimit uint64
}

// Machine is one defined VM.
type Machine struct {
	rt     *Runtime
	hv     virt.Hypervisor
	name   string
	layout Layout
	limit  uint64

	exited chan struct{} // closed when the VM stops after a Start
	mu     sync.Mutex
	exit   Exit
	killed bool
}

// Create prepares the VM's files and defines its domain. On error nothing
// it made is left behind.
func (rt *Runtime) Create(ctx context.Context, cfg Config) (_ *Machine, retErr error) {
	hv := rt.hv
	l := cfg.Layout
	if err := os.MkdirAll(l.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("state dir: %v: %w", err, errdefs.ErrInternal)
	}
	if cfg.Image.Disk != "" {
		info, err := inspectDisk(ctx, cfg.Image.Disk, cfg.Image.DiskFormat)
		if err != nil {
			return nil, err
		}
		if err := createOverlay(ctx, cfg.Image.Disk, cfg.Image.DiskFormat, info.VirtualSize, l.Overlay()); err != nil {
			return nil, err
		}
		defer func() {
			if retErr != nil {
				os.Remove(l.Overlay())
			}
		}()
	}
	p := l.Paths(cfg.Spec, cfg.Image)
	p.NICs, p.Volumes = cfg.NICs, cfg.Volumes
	d, err := convert.Domain(cfg.Spec, cfg.Host, p)
	if err != nil {
		return nil, err
	}
	xml, err := d.Marshal()
	if err != nil {
		return nil, fmt.Errorf("domain XML: %v: %w", err, errdefs.ErrInternal)
	}
	if err := hv.Define(ctx, xml); err != nil {
		return nil, err
	}
	m := &Machine{rt: rt, hv: hv, name: cfg.Spec.Name, layout: l, limit: cfg.MemoryLimit, exited: make(chan struct{})}
	rt.add(m)
	return m, nil
}

// Name is the domain name.
func (m *Machine) Name() string { return m.name }

// stopped records the VM's exit from its EventStopped.
func (m *Machine) stopped(r virt.StopReason) {
	m.mu.Lock()
	defer m.mu.Unlock()
	select {
	case <-m.exited:
		return // a VM stops once per Start
	default:
	}
	m.exit = exitFor(r)
	if m.killed && r == virt.StopDestroyed {
		m.exit.Message = "stopped hard on request"
	}
	close(m.exited)
}

// Prepare runs between QEMU's start and the guest's first instruction,
// with QEMU's pid: the moment to move QEMU into a cgroup, set limits, or
// connect to the console so no output is lost.
type Prepare func(ctx context.Context, pid int) error

// Start boots the VM: QEMU starts with its vCPUs stopped, gets its memory
// limit (live, because the limit in the XML needs CAP_SYS_RESOURCE) and
// whatever prepare does, then runs. If any of that fails the VM is stopped
// again. prepare may be nil.
func (m *Machine) Start(ctx context.Context, prepare Prepare) (retErr error) {
	if err := m.hv.Start(ctx, m.name, virt.StartOptions{Paused: true}); err != nil {
		return err
	}
	defer func() {
		if retErr != nil {
			retErr = errors.Join(retErr, m.hv.Destroy(context.WithoutCancel(ctx), m.name))
		}
	}()
	if m.limit > 0 {
		if err := m.hv.SetMemoryHardLimit(ctx, m.name, m.limit); err != nil {
			return err
		}
	}
	if prepare != nil {
		pid, err := m.PID(ctx)
		if err != nil {
			return err
		}
		if err := prepare(ctx, pid); err != nil {
			return err
		}
	}
	return m.hv.Resume(ctx, m.name)
}

// PID is QEMU's process id, 0 when the VM is not running.
func (m *Machine) PID(ctx context.Context) (int, error) {
	info, err := m.hv.Info(ctx, m.name)
	return info.PID, err
}

// Suspend stops the guest's vCPUs (Pause); QEMU and guest memory stay.
func (m *Machine) Suspend(ctx context.Context) error { return m.hv.Suspend(ctx, m.name) }

// Resume lets a suspended guest run again.
func (m *Machine) Resume(ctx context.Context) error { return m.hv.Resume(ctx, m.name) }

// Shutdown presses the ACPI power button; the guest decides when it powers off.
func (m *Machine) Shutdown(ctx context.Context) error { return m.hv.Shutdown(ctx, m.name) }

// Kill stops the VM hard.
func (m *Machine) Kill(ctx context.Context) error {
	m.mu.Lock()
	m.killed = true
	m.mu.Unlock()
	return m.hv.Destroy(ctx, m.name)
}

// Wait blocks until the VM stops, or ctx ends.
func (m *Machine) Wait(ctx context.Context) (Exit, error) {
	select {
	case <-m.exited:
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.exit, nil
	case <-ctx.Done():
		return Exit{}, ctx.Err()
	}
}

// Delete stops the VM if it runs, removes its definition and every file it
// had in the state dir but the libvirt root, which goes with the connection.
func (m *Machine) Delete(ctx context.Context) error {
	defer m.rt.remove(m)
	errs := []error{m.hv.Destroy(ctx, m.name)}
	if err := m.hv.Undefine(ctx, m.name); err != nil && !errdefs.IsNotFound(err) {
		errs = append(errs, err)
	}
	l := m.layout
	for _, f := range []string{l.Overlay(), l.Console(), l.ConsoleLog(), l.GuestAgent(), l.NVRAM(), l.CloudInitISO()} {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
