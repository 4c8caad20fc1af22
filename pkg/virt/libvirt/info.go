package libvirt

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	lv "libvirt.org/go/libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/vmpod/vmpod/pkg/virt"
)

// Info implements virt.Hypervisor.
func (c *Conn) Info(ctx context.Context, name string) (virt.Info, error) {
	d, err := c.domain(ctx, name)
	if err != nil {
		return virt.Info{}, err
	}
	defer d.Free()
	st, reason, err := d.GetState()
	if err != nil {
		return virt.Info{}, classify(err, subject(name))
	}
	info := virt.Info{State: mapState(st), Reason: mapReason(st, reason),
		PausedOnIOError: st == lv.DOMAIN_PAUSED && lv.DomainPausedReason(reason) == lv.DOMAIN_PAUSED_IOERROR}
	if info.State.Active() && c.root != "" {
		if info.PID, err = c.pid(name); err != nil {
			return virt.Info{}, err
		}
		info.Log = filepath.Join(c.root, "log", "qemu", name+".log")
	}
	return info, nil
}

// pid reads QEMU's pid from the pidfile libvirt keeps in the embed root's
// state dir, <root>/run/qemu/<name>.pid. libvirt writes it before it
// reports the domain running and rewrites it on every start, and a
// re-attaching connection finds it where the previous process left it.
func (c *Conn) pid(name string) (int, error) {
	path := filepath.Join(c.root, "run", "qemu", name+".pid")
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		// Only seen while a concurrent Start is still writing it.
		return 0, fmt.Errorf("pid of %s: %w: %v", subject(name), errdefs.ErrUnavailable, err)
	}
	if err != nil {
		return 0, fmt.Errorf("pid of %s: %w: %v", subject(name), errdefs.ErrInternal, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("pid of %s: %w: bad pidfile %s: %q", subject(name), errdefs.ErrInternal, path, b)
	}
	return pid, nil
}

func mapState(s lv.DomainState) virt.State {
	switch s {
	case lv.DOMAIN_RUNNING, lv.DOMAIN_BLOCKED:
		return virt.StateRunning
	case lv.DOMAIN_PAUSED:
		return virt.StatePaused
	case lv.DOMAIN_SHUTDOWN:
		return virt.StateShuttingDown
	case lv.DOMAIN_SHUTOFF:
		return virt.StateShutoff
	case lv.DOMAIN_CRASHED:
		return virt.StateCrashed
	case lv.DOMAIN_PMSUSPENDED:
		return virt.StatePMSuspended
	default:
		return virt.StateUnknown
	}
}

func mapReason(s lv.DomainState, reason int) virt.StopReason {
	switch s {
	case lv.DOMAIN_CRASHED:
		return virt.StopCrashed
	case lv.DOMAIN_SHUTOFF:
	default:
		return virt.StopNone
	}
	switch lv.DomainShutoffReason(reason) {
	case lv.DOMAIN_SHUTOFF_SHUTDOWN:
		return virt.StopGuestShutdown
	case lv.DOMAIN_SHUTOFF_DESTROYED:
		return virt.StopDestroyed
	case lv.DOMAIN_SHUTOFF_CRASHED:
		return virt.StopCrashed
	// DAEMON: libvirt killed QEMU itself while re-attaching, finding it
	// unusable.
	case lv.DOMAIN_SHUTOFF_FAILED, lv.DOMAIN_SHUTOFF_DAEMON:
		return virt.StopFailed
	case lv.DOMAIN_SHUTOFF_MIGRATED, lv.DOMAIN_SHUTOFF_SAVED, lv.DOMAIN_SHUTOFF_FROM_SNAPSHOT:
		return virt.StopOther
	default:
		return virt.StopUnknown
	}
}

// Stats implements virt.Hypervisor.
func (c *Conn) Stats(ctx context.Context, name string) (virt.Stats, error) {
	d, err := c.domain(ctx, name)
	if err != nil {
		return virt.Stats{}, err
	}
	defer d.Free()
	// GetInfo and MemoryStats work on every driver; the bulk stats API gives
	// only the state on the test driver, so it is used for I/O alone.
	info, err := d.GetInfo()
	if err != nil {
		return virt.Stats{}, classify(err, "stats of "+subject(name))
	}
	if !mapState(info.State).Active() {
		return virt.Stats{}, fmt.Errorf("stats of %s: %w: not running", subject(name), errdefs.ErrFailedPrecondition)
	}
	s := virt.Stats{CPUTime: time.Duration(info.CpuTime), MemoryActual: info.Memory * 1024}
	mem, err := d.MemoryStats(uint32(lv.DOMAIN_MEMORY_STAT_NR), 0)
	if err != nil {
		return virt.Stats{}, classify(err, "memory stats of "+subject(name))
	}
	for _, m := range mem {
		switch lv.DomainMemoryStatTags(m.Tag) {
		case lv.DOMAIN_MEMORY_STAT_ACTUAL_BALLOON:
			s.MemoryActual = m.Val * 1024
		case lv.DOMAIN_MEMORY_STAT_RSS:
			s.MemoryRSS = m.Val * 1024
		}
	}
	all, err := c.conn.GetAllDomainStats([]*lv.Domain{d}, lv.DOMAIN_STATS_BLOCK, 0)
	if err != nil {
		return virt.Stats{}, classify(err, "block stats of "+subject(name))
	}
	for _, rec := range all {
		for _, b := range rec.Block {
			s.Block.ReadBytes += b.RdBytes
			s.Block.WriteBytes += b.WrBytes
			s.Block.ReadOps += b.RdReqs
			s.Block.WriteOps += b.WrReqs
		}
		_ = rec.Domain.Free()
	}
	return s, nil
}

// Capabilities implements virt.Hypervisor.
func (c *Conn) Capabilities(ctx context.Context, virtType string) (string, string, error) {
	if err := ctx.Err(); err != nil {
		return "", "", err
	}
	caps, err := c.conn.GetCapabilities()
	if err != nil {
		return "", "", classify(err, "host capabilities")
	}
	var parsed libvirtxml.Caps
	if err := parsed.Unmarshal(caps); err != nil {
		return "", "", fmt.Errorf("host capabilities: %w: %v", errdefs.ErrInternal, err)
	}
	if parsed.Host.CPU == nil || parsed.Host.CPU.Arch == "" {
		return "", "", fmt.Errorf("host capabilities: %w: no host arch", errdefs.ErrInternal)
	}
	arch := parsed.Host.CPU.Arch
	if virtType == "" {
		virtType = bestVirtType(&parsed, arch)
	}
	domCaps, err := c.conn.GetDomainCapabilities("", arch, "", virtType, 0)
	if err != nil {
		return "", "", classify(err, "domain capabilities for "+arch)
	}
	return caps, domCaps, nil
}

// bestVirtType is "kvm" when libvirt lists it for the host arch, which it
// does only when /dev/kvm is usable, else "qemu" (TCG).
func bestVirtType(caps *libvirtxml.Caps, arch string) string {
	for _, g := range caps.Guests {
		if g.OSType != "hvm" || g.Arch.Name != arch {
			continue
		}
		for _, d := range g.Arch.Domains {
			if d.Type == "kvm" {
				return "kvm"
			}
		}
	}
	return "qemu"
}
