package vm

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"

	"github.com/vmpod/vmpod/pkg/convert"
	"github.com/vmpod/vmpod/pkg/host"
	"github.com/vmpod/vmpod/pkg/jail"
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
	// Jail confines QEMU; required.
	Jail Jail
	// Cgroup is the cgroup QEMU's jailer enters, with its limits, before
	// it execs QEMU (nil: QEMU stays in libvirt's process's cgroup).
	Cgroup *jail.Cgroup
	// OOMScoreAdj is QEMU's oom_score_adj, set by its jail (nil: the one
	// inherited from libvirt's process).
	OOMScoreAdj *int
	// Netns is the pod's network namespace, which QEMU's jailer enters
	// before it execs QEMU ("": QEMU stays in libvirt's process's).
	Netns string
	// ConsoleOut receives what the guest writes on its serial console,
	// from its first byte (nil: the log only). ConsoleLogBytes caps each
	// of the log's two files (0: DefaultConsoleLogBytes).
	ConsoleOut      io.Writer
	ConsoleLogBytes int64
	// From, when set, makes the VM start from a checkpoint instead of
	// booting.
	From *From
}

// From is the checkpoint a VM starts from: files Checkpoint wrote, whose
// sums were checked.
type From struct {
	// State is the state file, which stays where it is: libvirt opens it
	// at Start and hands QEMU a descriptor.
	State string
	// Saved is the definition in State (virt.Hypervisor.SavedDefinition).
	Saved string
	// Disk is the disk overlay as it was, copied to the VM's overlay.
	Disk string
	// Beside is set when another VM of this node was restored from the
	// same state and holds its domain. Then Create restores this one as
	// a domain of its own name and a new UUID from a copy of State that
	// says so (virt.Hypervisor.CopyStateAs), which Start removes once
	// QEMU loaded it, and fills Saved from the copy. Its guest wakes
	// with the other's MAC, GuestMAC: Start gives it the pod's through
	// its agent (takePodMAC).
	Beside   bool
	GuestMAC net.HardwareAddr
}

// Jail is how QEMU is confined (pkg/jail).
type Jail struct {
	// Jailer is the link to vm-runtime named jail.EmulatorName
	// (jail.LinkEmulator makes it), the domain's emulator.
	Jailer string
	// UID and GID QEMU runs as: the pod's own (jail.Allocate).
	UID, GID uint32
	// Leases is the dir of uid leases, and UIDs the range, the pod's
	// file servers lease their uid from when its VM has shares: a second
	// one of the pod's, so QEMU can neither signal nor trace them.
	Leases string
	UIDs   jail.Range
	// LibvirtRoot is the embedded libvirt's root: QEMU is shown the secret
	// file libvirt writes there for it and nothing else of it.
	LibvirtRoot string
	// DiskCap is the largest file QEMU may write: the guest's disk overlay
	// grows to at most this many bytes, and a guest write past it is an
	// I/O error in the guest. 0: no cap.
	DiskCap uint64
}

// Machine is one defined VM.
type Machine struct {
	rt     *Runtime
	hv     virt.Hypervisor
	name   string
	layout Layout
	limit  uint64

	// The serial console, when the spec has one: attached at Start.
	consoleSocket   string
	consoleOut      io.Writer
	consoleLogBytes int64
	console         *console

	phases Phases // of Create and Start

	// restoreCopy: restoreFrom is the VM's own copy (From.Beside), which
	// Start removes once QEMU loaded it.
	restoreCopy bool
	// guestMAC, when set, is the MAC the restored guest wakes with, which
	// Start replaces with podMAC (takePodMAC).
	guestMAC net.HardwareAddr
	podMAC   string
	// restoreFrom is the state file Start restores the VM from instead
	// of booting it, "" to boot.
	restoreFrom string

	exited   chan struct{} // closed when the VM stops after a Start
	mu       sync.Mutex
	exit     Exit
	killed   bool
	stopping bool            // its stop is known, its exit being worked out
	shutdown virt.StopReason // who QEMU last said asked it to shut down
	qemu     *qemuProc       // QEMU's pidfd, from Start (or Adopt) to its exit
	// waitingForSpace: QEMU paused the VM on a full disk and
	// resumeOnSpace waits for room.
	waitingForSpace bool
}

// Create prepares the VM's files and defines its domain. On error nothing
// it made is left behind.
func (rt *Runtime) Create(ctx context.Context, cfg Config) (_ *Machine, retErr error) {
	hv := rt.hv
	l := cfg.Layout
	var phases Phases
	watch := newStopwatch(&phases)
	if cfg.Jail.Jailer == "" || cfg.Jail.UID == 0 || cfg.Jail.GID == 0 {
		return nil, fmt.Errorf("QEMU has no jail (jailer %q, uid %d, gid %d): %w", cfg.Jail.Jailer, cfg.Jail.UID, cfg.Jail.GID, errdefs.ErrInternal)
	}
	if err := os.MkdirAll(l.VMDir(), 0o700); err != nil {
		return nil, fmt.Errorf("state dir: %v: %w", err, errdefs.ErrInternal)
	}
	if err := os.MkdirAll(l.JailRoot(), 0o700); err != nil {
		return nil, fmt.Errorf("state dir: %v: %w", err, errdefs.ErrInternal)
	}
	if cfg.Image.Disk != "" {
		size := cfg.Image.DiskSize
		if size == 0 { // not through InspectImage
			info, err := inspectDisk(cfg.Image.Disk, cfg.Image.DiskFormat)
			if err != nil {
				return nil, err
			}
			size = info.VirtualSize
		}
		if cfg.From != nil {
			if err := restoreOverlay(cfg.From.Disk, size, l.Overlay(), cfg.Jail.UID, cfg.Jail.GID); err != nil {
				return nil, err
			}
		} else if err := createOverlay(cfg.Image.Disk, cfg.Image.DiskFormat, size, l.Overlay(), cfg.Jail.UID, cfg.Jail.GID); err != nil {
			return nil, err
		}
		defer func() {
			if retErr != nil {
				os.Remove(l.Overlay())
			}
		}()
		watch.lap("overlay")
	}
	p := l.Paths(cfg.Spec, cfg.Image, cfg.Jail.Jailer)
	p.NICs, p.Volumes = cfg.NICs, cfg.Volumes
	d, err := convert.Domain(cfg.Spec, cfg.Host, p)
	if err != nil {
		return nil, err
	}
	js := jailSpec(cfg, d.Type)
	defer func() {
		if retErr != nil {
			os.Remove(l.JailSpec())
			os.RemoveAll(l.JailDevices())
		}
	}()
	if err := jail.Prepare(js); err != nil {
		return nil, fmt.Errorf("QEMU's jail: %v: %w", err, errdefs.ErrInternal)
	}
	if err := jail.Write(l.JailSpec(), js); err != nil {
		return nil, fmt.Errorf("%v: %w", err, errdefs.ErrInternal)
	}
	watch.lap("jail")
	var xml string
	if cfg.From != nil {
		if cfg.From.Beside {
			if err := hv.CopyStateAs(ctx, cfg.From.State, l.restoreState(), cfg.Spec.Name, newUUID()); err != nil {
				return nil, err
			}
			defer func() {
				if retErr != nil {
					os.Remove(l.restoreState())
				}
			}()
			watch.lap("state copy")
			if cfg.From.Saved, err = hv.SavedDefinition(ctx, l.restoreState()); err != nil {
				return nil, err
			}
		}
		xml, err = convert.Restored(cfg.From.Saved, d)
	} else {
		xml, err = d.Marshal()
	}
	if err != nil {
		return nil, fmt.Errorf("domain XML: %w", err)
	}
	if err := hv.Define(ctx, xml); err != nil {
		return nil, err
	}
	watch.lap("define")
	m := &Machine{rt: rt, hv: hv, name: cfg.Spec.Name, layout: l, limit: cfg.MemoryLimit, exited: make(chan struct{}), phases: phases,
		consoleOut: cfg.ConsoleOut, consoleLogBytes: cfg.ConsoleLogBytes}
	if cfg.From != nil {
		m.restoreFrom = cfg.From.State
		if cfg.From.Beside {
			m.restoreFrom = l.restoreState()
			m.restoreCopy = true
			m.guestMAC = cfg.From.GuestMAC
			for _, nic := range cfg.NICs {
				m.podMAC = nic.MAC // one NIC: the pod's
			}
		}
	}
	if cfg.Spec.Console {
		m.consoleSocket = l.Console()
	}
	rt.add(m)
	return m, nil
}

// newUUID is a random (version 4) UUID.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// jailSpec is the jail of cfg's QEMU, for a domain of type domainType.
func jailSpec(cfg Config, domainType string) jail.Spec {
	l := cfg.Layout
	s := jail.Spec{
		QEMU: cfg.Host.Emulator, UID: cfg.Jail.UID, GID: cfg.Jail.GID,
		Root:          l.JailRoot(),
		Writable:      []string{l.VMDir()},
		Owned:         []string{l.Overlay(), l.NVRAM(), l.Devices()},
		SecretDir:     filepath.Join(cfg.Jail.LibvirtRoot, "lib", "qemu"),
		FileSizeLimit: cfg.Jail.DiskCap,
		OOMScoreAdj:   cfg.OOMScoreAdj,
		Cgroup:        cfg.Cgroup,
		Netns:         cfg.Netns,
		Seccomp:       jail.ProfileQEMU,
	}
	for _, f := range []string{cfg.Image.Disk, cfg.Image.Kernel, cfg.Image.Initrd} {
		if f != "" {
			s.ReadOnly = append(s.ReadOnly, filepath.Clean(f))
		}
	}
	if domainType == string(host.AccelKVM) {
		s.Devices, s.DeviceDir = []string{"/dev/kvm"}, l.JailDevices()
	}
	return s
}

// Name is the domain name.
func (m *Machine) Name() string { return m.name }

// stopped records the VM's exit from its EventStopped. When the
// hypervisor cannot say why QEMU went, QEMU's wait status can (a signal),
// which the kernel may take a moment to give: that wait runs on its own
// goroutine, not the Runtime's event loop.
func (m *Machine) stopped(r virt.StopReason) {
	m.mu.Lock()
	if m.stopping {
		m.mu.Unlock()
		return // a VM stops once per Start
	}
	m.stopping = true
	if r == virt.StopGuestShutdown && m.shutdown == virt.StopDestroyed {
		// A signal QEMU catches (SIGTERM, SIGINT, SIGHUP) makes it say
		// SHUTDOWN from the host and exit cleanly; libvirt then reports
		// the stop as a shutdown, as if the guest had powered off.
		r = virt.StopDestroyed
	}
	killed, qemu := m.killed, m.qemu
	m.qemu = nil // this stop's from now on: a Delete meanwhile leaves it
	m.mu.Unlock()
	if qemu == nil || !uncertain(r) {
		qemu.close()
		m.finish(exitFor(r, killed, 0, false))
		return
	}
	go func() {
		defer qemu.close()
		ws, known := qemu.status(qemuStatusWait)
		m.finish(exitFor(r, killed, ws, known))
	}()
}

// shuttingDown records who QEMU says asked it to shut down (EventShutdown):
// the guest, or the host (a signal).
func (m *Machine) shuttingDown(r virt.StopReason) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.shutdown = r
}

// finish records the VM's exit, ends the serial console with a line
// saying it (unless the guest powered off), and wakes Wait.
func (m *Machine) finish(e Exit) {
	m.mu.Lock()
	defer m.mu.Unlock()
	select {
	case <-m.exited:
		return
	default:
	}
	m.stopping = true
	m.exit = e
	if m.console != nil {
		m.console.end(e.consoleNote())
	}
	m.qemu.close()
	m.qemu = nil
	close(m.exited)
}

// Prepare runs between QEMU's start and the guest's first instruction,
// with QEMU's pid: the moment to move QEMU into a cgroup, set limits, or
// connect to the console so no output is lost.
type Prepare func(ctx context.Context, pid int) error

// Start boots the VM, or restores it from its checkpoint (Config.From):
// QEMU starts with its vCPUs stopped, gets its memory
// limit (live, because the limit in the XML needs CAP_SYS_RESOURCE), its
// serial console attached and whatever prepare does, then runs. If any of
// that fails the VM is stopped again. prepare may be nil.
func (m *Machine) Start(ctx context.Context, prepare Prepare) (retErr error) {
	watch := newStopwatch(&m.phases)
	if m.restoreFrom != "" {
		err := m.hv.Restore(ctx, m.name, m.restoreFrom)
		if m.restoreCopy {
			// QEMU has loaded it, or will never.
			if rerr := os.Remove(m.restoreFrom); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
				log.L.WithError(rerr).WithField("vm", m.name).Warn("the copy of the state it was restored from stays")
			}
		}
		if err != nil {
			return err
		}
		watch.lap("restore")
	} else {
		if err := m.hv.Start(ctx, m.name, virt.StartOptions{Paused: true}); err != nil {
			return err
		}
		watch.lap("qemu")
	}
	defer func() {
		if retErr != nil {
			retErr = errors.Join(retErr, m.hv.Destroy(context.WithoutCancel(ctx), m.name))
		}
	}()
	info, err := m.hv.Info(ctx, m.name)
	if err != nil {
		return err
	}
	pid := info.PID
	m.watchQEMU(ctx, info)
	if m.limit > 0 {
		if err := m.hv.SetMemoryHardLimit(ctx, m.name, m.limit); err != nil {
			return err
		}
		watch.lap("limit")
	}
	if m.consoleSocket != "" {
		c, err := attachConsole(m.consoleSocket, m.layout.ConsoleLog(), m.consoleLogBytes, m.consoleOut, false)
		if err != nil {
			return err
		}
		m.mu.Lock()
		m.console = c
		m.mu.Unlock()
		watch.lap("console")
	}
	if prepare != nil {
		if err := prepare(ctx, pid); err != nil {
			return err
		}
		watch.lap("prepare")
	}
	if m.restoreFrom != "" {
		// The guest wakes on the pod's network with the address it had
		// on the one it was saved on: it finds its link down and, once
		// it comes back (relink), asks for its address again.
		if err := m.hv.SetLink(ctx, m.name, false); err != nil {
			return err
		}
	}
	if err := m.hv.Resume(ctx, m.name); err != nil {
		return err
	}
	watch.lap("resume")
	if m.restoreFrom != "" {
		resumed := time.Now()
		if m.guestMAC != nil {
			if err := m.takePodMAC(ctx); err != nil {
				return err
			}
			watch.lap("guest MAC")
		}
		go m.relink(time.Until(resumed.Add(relinkAfter)))
	}
	return nil
}

// relinkAfter is how long a restored guest's link stays down after it
// runs: long enough for its kernel to see the carrier go (a config
// interrupt, then a work item) before it comes back, or it sees no change
// at all. Its old address is of no use meanwhile.
var relinkAfter = 500 * time.Millisecond

// relink brings a restored guest's link up again: a DHCP client that
// follows the carrier (systemd-networkd's, NetworkManager's, the test
// guest's) then leases the pod's address. A guest whose client does not
// keeps the address it had; docs/day2.md says so.
func (m *Machine) relink(after time.Duration) {
	select {
	case <-m.exited:
		return
	case <-time.After(after):
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := m.hv.SetLink(ctx, m.name, true); err != nil {
		select {
		case <-m.exited: // it stopped meanwhile
		default:
			log.L.WithError(err).WithField("vm", m.name).Warn("the restored guest's link stays down")
		}
	}
}

// watchQEMU takes a pidfd on QEMU (the hypervisor just reported it), for
// its wait status should it die, and caps its log until it goes.
func (m *Machine) watchQEMU(ctx context.Context, info virt.Info) {
	p := openQEMU(ctx, &m.rt.logs, info)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopping || m.qemu != nil {
		p.close()
		return
	}
	m.qemu = p
}

// Phases are how long the steps of Create and Start took.
func (m *Machine) Phases() Phases { return m.phases }

// ConsoleInput is where to write to the guest's serial console; nil
// before Start or without a console.
func (m *Machine) ConsoleInput() io.Writer {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.console == nil {
		return nil
	}
	return m.console.conn
}

// ConsoleDone is closed once the guest's last console output was copied
// (QEMU exited); it is closed already without a console.
func (m *Machine) ConsoleDone() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.console == nil {
		done := make(chan struct{})
		close(done)
		return done
	}
	return m.console.done
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

// Exited is how the VM ended, and whether it has, without waiting.
func (m *Machine) Exited() (Exit, bool) {
	select {
	case <-m.exited:
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.exit, true
	default:
		return Exit{}, false
	}
}

// Delete stops the VM if it runs, removes its definition and every file it
// had in the state dir but the libvirt root, which goes with the connection.
func (m *Machine) Delete(ctx context.Context) error {
	defer m.rt.remove(m)
	var errs []error
	if err := m.hv.Destroy(ctx, m.name); err != nil && !errdefs.IsNotFound(err) {
		errs = append(errs, err)
	}
	m.mu.Lock()
	m.qemu.close()
	m.qemu = nil
	if m.console != nil {
		m.console.close()
		// Bounded: the copy may be stuck writing to a stdout nobody reads.
		select {
		case <-m.console.done:
		case <-time.After(2 * time.Second):
		}
	}
	m.mu.Unlock()
	if err := m.hv.Undefine(ctx, m.name); err != nil && !errdefs.IsNotFound(err) {
		errs = append(errs, err)
	}
	l := m.layout
	errs = append(errs, os.RemoveAll(l.VMDir()), os.RemoveAll(l.JailDevices()))
	for _, f := range []string{l.JailSpec(), l.JailRoot(), l.ConsoleLog(), l.ConsoleLog() + ".1", l.GuestAgent()} {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
