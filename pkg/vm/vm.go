package vm

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"sync"
	"time"

	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/vmpod/vmpod/pkg/convert"
	"github.com/vmpod/vmpod/pkg/host"
	"github.com/vmpod/vmpod/pkg/podcgroup"
	"github.com/vmpod/vmpod/pkg/podnet"
	"github.com/vmpod/vmpod/pkg/virt"
	"github.com/vmpod/vmpod/pkg/vmspec"
)

// Request is one VM a front door asks for, in pkg/vm's terms: a front door
// translates what it was handed (an OCI bundle, a CRI request) into it and
// does nothing else of the VM's making.
type Request struct {
	Spec   vmspec.Spec
	Layout Layout
	// Jail is the pod's QEMU jail (LeaseJail): QEMU runs in it, and its
	// uid owns the overlay.
	Jail Jail
	// Rootfs is the containerdisk's root on the host, a directory. When
	// RootfsMounts are given, Create mounts them on it first (and the undo
	// unmounts).
	Rootfs       string
	RootfsMounts []mount.Mount
	// Network is the pod network the VM takes over (ignored for a spec
	// without NICs).
	Network Network
	// BlockDevices are the block volumes the front door was handed.
	BlockDevices []BlockDevice
	// ShareSources are the host dirs of the spec's filesystem volumes, by
	// vmspec.Share tag: what each share's file server serves. The front
	// door resolved and checked them (vmspec.MountRules).
	ShareSources map[string]string
	// CloudInitDir is where the spec's cloud-init volume is on the host,
	// "" when it takes none or it is not mounted.
	CloudInitDir string
	// InstanceID is the cloud-init instance id (the pod's UID; the domain
	// name when empty); Network.Hostname is the guest's hostname.
	InstanceID string
	// Cgroup is QEMU's cgroup: the container's, under the pod's. The pod
	// cgroup's memory limit bounds the VM (CheckPodLimit); QEMU moves into
	// Cgroup, with guest RAM plus overhead as its limit and CPU as its CPU
	// controls, before the guest's first instruction.
	Cgroup podcgroup.Path
	CPU    *specs.LinuxCPU
	// OOMScoreAdj is QEMU's oom_score_adj: the kubelet's for the
	// container (OCI process.oomScoreAdj, CRI oom_score_adj), not the
	// runtime's, which QEMU would inherit. nil keeps the inherited one.
	OOMScoreAdj *int
	// ConsoleOut receives the serial console from its first byte (nil:
	// the log only); ConsoleLogBytes caps each console log file.
	ConsoleOut      io.Writer
	ConsoleLogBytes int64
	// From is a checkpoint dir (VM.Checkpoint wrote it) the VM starts
	// from instead of booting: its guest goes on where it was, in the
	// checkpoint's domain name (its identity in the hypervisor), with
	// this pod's spec, which must be the same virtual hardware. The
	// front door decides whether the checkpoint is to be trusted; Create
	// checks its files against their manifest. "" boots.
	From string
	// Trust are the keys whose signature makes a checkpoint an image
	// carries (Image.State) one to start from; none: such an image is
	// refused.
	Trust []ed25519.PublicKey
	// DefaultMaxVCPUs is the node's cap on the room to grow in vCPUs a
	// VM whose pod set no vmpod.io/max-vcpus gets (withDefaultRoom); 0
	// gives such a VM none.
	DefaultMaxVCPUs int
	// Record is called with what the VM holds on the node before each
	// thing is acquired and after each is released, for the front door's
	// checkpoint; an empty Held (Held.Empty) means nothing is left. If it
	// fails, the step it announced is not taken. nil: no record.
	Record func(Held) error
}

// Env is what a VM needs of its node: the hypervisor connection (with the
// Runtime reading its events) and what the node can do.
type Env struct {
	Runtime *Runtime
	Host    host.Host
}

// Opener gives Create its Env. Create calls it once, after the image
// passed intake, so a refused image costs no hypervisor connection (which
// probes QEMU).
type Opener func(ctx context.Context) (Env, error)

// VM is one VM of a pod, from Create to Delete: everything it holds on the
// node, and its Machine.
type VM struct {
	spec    vmspec.Spec
	layout  Layout
	hv      virt.Hypervisor // nil until the Opener ran
	host    host.Host       // the node, as the Opener saw it
	machine *Machine
	// machineGone: Delete removed the machine. The Machine stays, for
	// Wait and Exited: the CRI server's exit watcher deletes a VM as soon
	// as it stops, while a StopContainer that killed it may still be in
	// Stop, waiting for that exit.
	machineGone bool
	network     Network
	pod         *podnet.Pod // the pod network Start wires, nil for none
	net         *podnet.Attachment
	cgPath      podcgroup.Path
	cpu         *specs.LinuxCPU
	limit       uint64
	cgroup      *podcgroup.Cgroup
	startMemory uint64 // the cgroup's memory use before the guest ran
	held        Held
	record      func(Held) error
	resizing    sync.Mutex // held by Update and Checkpoint
	// defaultRoom: the VM's room to grow in vCPUs is the node's default
	// (withDefaultRoom), or a checkpoint's, not one its pod asked for.
	defaultRoom bool
	restored    bool   // Start restores it from a checkpoint
	phases      Phases // of Create, before the Machine's

	// The pod's volumes: the jail (its file server uid), each share's
	// host dir by tag, and the file servers Start started.
	rt           *Runtime
	jail         Jail
	oomScoreAdj  *int
	shareSources map[string]string
	fileServerState
}

// Create makes the VM up to a defined, not yet started domain: image
// intake (the rootfs mounted if asked, FindImage and the disk checks), the
// Env opened, the overhead checked against the pod's memory limit, a fresh
// VM dir, the pod network taken over, the block volume nodes, the
// cloud-init seed, the overlay, QEMU's jail and the domain. On error all
// it made is undone, and Record is told so with an empty Held when the
// undo was complete.
func Create(ctx context.Context, req Request, open Opener) (_ *VM, retErr error) {
	req.Network = req.Network.withDefaults(req.Spec.Name)
	v := &VM{spec: req.Spec, layout: req.Layout, cgPath: req.Cgroup, cpu: req.CPU, record: req.Record, network: req.Network,
		jail: req.Jail, oomScoreAdj: req.OOMScoreAdj}
	watch := newStopwatch(&v.phases)
	v.held.Netns = req.Network.Netns
	defer func() {
		if retErr != nil {
			if err := v.Delete(context.WithoutCancel(ctx)); err != nil {
				retErr = fmt.Errorf("%w (and its undo: %v)", retErr, err)
			}
		}
	}()

	// The image first: a refused one costs no hypervisor.
	if len(req.RootfsMounts) > 0 {
		if err := v.acquire(func(h *Held) { h.Rootfs = req.Rootfs }); err != nil {
			return nil, err
		}
		if err := mount.All(req.RootfsMounts, req.Rootfs); err != nil {
			return nil, fmt.Errorf("mount the image: %v: %w", err, errdefs.ErrInternal)
		}
	}
	img, err := InspectImage(req.Rootfs)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", req.Spec.Image, err)
	}
	if img.State != "" {
		if req.From != "" {
			return nil, fmt.Errorf("image %s carries a checkpoint, and another was given to restore: %w", req.Spec.Image, errdefs.ErrInvalidArgument)
		}
		if err := VerifyCheckpoint(img.State, req.Trust); err != nil {
			return nil, fmt.Errorf("image %s: %w", req.Spec.Image, err)
		}
		req.From = img.State
	}
	var from *From
	var restoreMAC net.HardwareAddr
	var fromMachine, fromDomain, podName string
	if req.From != "" {
		m, err := ReadCheckpoint(req.From)
		if err != nil {
			return nil, err
		}
		if req.Spec.MaxVCPUs == 0 {
			// The pod asks no maximum: the checkpoint's virtual
			// hardware is what it restores, room to grow included.
			req.Spec.MaxVCPUs, v.spec.MaxVCPUs = m.Spec.MaxVCPUs, m.Spec.MaxVCPUs
			v.defaultRoom = m.Spec.MaxVCPUs != 0
		}
		if err := checkRestorable(m, req.Spec); err != nil {
			return nil, fmt.Errorf("restore from %s: %w", req.From, err)
		}
		from = &From{State: filepath.Join(req.From, CheckpointState)}
		if _, ok := m.Files[CheckpointDisk]; ok {
			from.Disk = filepath.Join(req.From, CheckpointDisk)
		}
		if (from.Disk != "") != (img.Disk != "") {
			return nil, fmt.Errorf("restore from %s: the checkpoint has a disk overlay: %t, the image a disk: %t: %w",
				req.From, from.Disk != "", img.Disk != "", errdefs.ErrFailedPrecondition)
		}
		podName, fromDomain = req.Spec.Name, m.Domain
		v.spec.Name, req.Spec.Name = m.Domain, m.Domain
		fromMachine = m.Machine
		if m.MAC != "" && len(req.Spec.NICs) > 0 {
			if restoreMAC, err = net.ParseMAC(m.MAC); err != nil {
				return nil, fmt.Errorf("restore from %s: MAC %q: %v: %w", req.From, m.MAC, err, errdefs.ErrInvalidArgument)
			}
		}
	}
	if v.shareSources, err = checkShareSources(req.Spec, req.ShareSources); err != nil {
		return nil, err
	}
	watch.lap("intake")

	env, err := open(ctx)
	if err != nil {
		return nil, err
	}
	if a := req.OOMScoreAdj; a != nil && (*a < -1000 || *a > 1000) {
		return nil, fmt.Errorf("oom_score_adj %d: not in [-1000, 1000]: %w", *a, errdefs.ErrInvalidArgument)
	}
	v.hv, v.rt, v.host = env.Runtime.hv, env.Runtime, env.Host
	if from == nil {
		asked := req.Spec.MaxVCPUs
		req.Spec = withDefaultRoom(req.Spec, env.Host, req.Layout.Paths(req.Spec, img, ""), req.DefaultMaxVCPUs,
			podcgroup.MemoryLimit(req.Cgroup.PodDir()))
		v.spec.MaxVCPUs, v.defaultRoom = req.Spec.MaxVCPUs, req.Spec.MaxVCPUs != asked
	}
	v.limit = MemoryLimit(req.Spec, env.Host)
	if err := CheckPodLimit(req.Spec, env.Host, podcgroup.MemoryLimit(req.Cgroup.PodDir())); err != nil {
		return nil, err
	}
	if from != nil {
		if err := checkNodeMachine(fromMachine, env.Host); err != nil {
			return nil, fmt.Errorf("restore from %s: %w", req.From, err)
		}
		env.Runtime.restoring.Lock()
		defer env.Runtime.restoring.Unlock()
		// The restored VM keeps the checkpoint's domain (its name and
		// UUID), which one VM of a node can hold at a time. A VM of this
		// node has it already (the pod the checkpoint was taken of, or
		// another pod restored from it): this one is restored beside it
		// as a domain of the pod's own name, and its guest takes the
		// pod's MAC (From.Beside).
		if _, err := v.hv.Info(ctx, fromDomain); err == nil {
			if podName == fromDomain {
				return nil, fmt.Errorf("restore from %s: the checkpoint's VM (domain %s) runs on this node, in a pod of the same name: %w",
					req.From, fromDomain, errdefs.ErrFailedPrecondition)
			}
			v.spec.Name, req.Spec.Name = podName, podName
			from.Beside, from.GuestMAC, restoreMAC = true, restoreMAC, nil
		} else if !errdefs.IsNotFound(err) {
			return nil, err
		} else if from.Saved, err = v.hv.SavedDefinition(ctx, from.State); err != nil {
			return nil, fmt.Errorf("restore from %s: %w", req.From, err)
		}
		v.restored = true
	}
	if err := req.Layout.PrepareVMDir(); err != nil {
		return nil, fmt.Errorf("VM dir: %v: %w", err, errdefs.ErrInternal)
	}
	watch.lap("open")

	// The pod network: its identity read in the pod's namespace, the tap
	// made in the node's, where libvirt opens it at Start; Start moves it
	// into the pod's and wires it there before the guest runs.
	var nics map[string]convert.NIC
	if len(req.Spec.NICs) > 0 {
		if restoreMAC != nil {
			if err := adoptMAC(req.Network, restoreMAC); err != nil {
				return nil, err
			}
		}
		pn, err := inspectNetwork(req.Network)
		if err != nil {
			return nil, err
		}
		tap := req.Network.Tap
		if err := v.acquire(func(h *Held) { h.NodeTap, h.PodIf = tap, req.Network.Interface }); err != nil {
			return nil, err
		}
		if err := podnet.CreateTap(tap); err != nil {
			return nil, fmt.Errorf("pod network: %v: %w", err, errdefs.ErrInternal)
		}
		v.pod = &pn
		nics = map[string]convert.NIC{req.Spec.NICs[0].Name: {Tap: tap, MAC: pn.MAC.String(), MTU: uint(pn.MTU)}}
		watch.lap("network")
	}

	vols, made, err := MakeDevices(req.Layout, req.Spec, req.BlockDevices)
	v.held.Devices = made
	if rerr := v.save(); err == nil {
		err = rerr
	}
	if err != nil {
		return nil, err
	}
	if len(made) > 0 {
		watch.lap("devices")
	}
	if err := WriteSeed(req.Layout, req.Spec, req.CloudInitDir, req.InstanceID, req.Network.Hostname); err != nil {
		return nil, err
	}
	if req.Spec.Seeded() {
		watch.lap("seed")
	}

	if err := v.acquire(func(h *Held) { h.Domain = req.Spec.Name }); err != nil {
		return nil, err
	}
	v.machine, err = env.Runtime.Create(ctx, Config{Spec: req.Spec, Host: env.Host, Image: img, Layout: req.Layout,
		NICs: nics, Volumes: vols, Jail: req.Jail, OOMScoreAdj: req.OOMScoreAdj, Netns: req.Network.Netns,
		Cgroup:     jailCgroup(v.cgPath, v.limit, v.cpu),
		ConsoleOut: req.ConsoleOut, ConsoleLogBytes: req.ConsoleLogBytes, From: from})
	if err != nil {
		return nil, err
	}
	return v, nil
}

// acquire records that the VM is about to hold what set adds, before it
// is made, so a crash in between leaves a record the undo can replay
// (undoing what was never made is no error).
func (v *VM) acquire(set func(*Held)) error {
	set(&v.held)
	return v.save()
}

func (v *VM) save() error {
	if v.record == nil {
		return nil
	}
	if err := v.record(v.held); err != nil {
		return fmt.Errorf("record what the VM holds: %v: %w", err, errdefs.ErrInternal)
	}
	return nil
}

// Held is what the VM holds on the node now.
func (v *VM) Held() Held { return v.held }

// Phases are how long each step of Create and Start took (Phases).
func (v *VM) Phases() Phases {
	p := append(Phases(nil), v.phases...)
	if v.machine != nil {
		p = append(p, v.machine.Phases()...)
	}
	return p
}

// Spec is the VM's spec.
func (v *VM) Spec() vmspec.Spec { return v.spec }

// StartMemory is the memory QEMU's cgroup used when QEMU had started and
// the guest had not yet run a single instruction: QEMU's own start-up,
// the kernel and initrd it loaded, charged to the container (0 before
// Start, or after an adoption).
func (v *VM) StartMemory() uint64 { return v.startMemory }

// Start boots the VM. QEMU starts in the Request's cgroup, with its
// memory limit (guest RAM plus overhead) and CPU controls: its jailer
// enters it before it execs QEMU (jail.Spec.Cgroup). Before the guest's first
// instruction the console attaches. It returns QEMU's pid.
func (v *VM) Start(ctx context.Context) (int, error) {
	if err := v.acquire(func(h *Held) { h.Cgroup = v.cgPath.Raw }); err != nil {
		return 0, err
	}
	prepare := func(ctx context.Context, pid int) error {
		if err := v.wire(); err != nil {
			return err
		}
		cg, err := podcgroup.Load(v.cgPath)
		if err != nil {
			return fmt.Errorf("QEMU %d's cgroup, which its jailer made: %w", pid, err)
		}
		v.cgroup = cg
		v.startMemory = cg.MemoryUsage()
		return nil
	}
	if err := v.startFileServers(); err != nil {
		return 0, err
	}
	started := time.Now()
	if err := v.machine.Start(ctx, prepare); err != nil {
		return 0, v.explainStart(err)
	}
	if v.restored {
		v.syncGuestClock(ctx)
		if v.net != nil {
			go v.watchLease(v.net, started)
		}
	}
	return v.machine.PID(ctx)
}

// wire moves the tap that QEMU now has open into the pod's network
// namespace and wires it to the pod interface there, recorded in Held as
// it goes: the tap in both namespaces while it moves.
func (v *VM) wire() error {
	if v.pod == nil || v.net != nil {
		return nil
	}
	tap := v.held.NodeTap
	if err := v.acquire(func(h *Held) { h.Tap = tap }); err != nil {
		return err
	}
	if err := podnet.MoveTap(tap, v.network.Netns); err != nil {
		return fmt.Errorf("pod network: %v: %w", err, errdefs.ErrInternal)
	}
	if err := v.acquire(func(h *Held) { h.NodeTap = "" }); err != nil {
		return err
	}
	a, err := wireNetwork(v.network, *v.pod, tap)
	if err != nil {
		return err
	}
	v.net = a
	return nil
}

// Wait blocks until the VM stops after a Start, or ctx ends. A VM the
// kernel's OOM killer ended in its cgroup exits 137 with Reason
// "OOMKilled"; one whose file server failed exits 1, "Error", with a
// message naming the volume.
func (v *VM) Wait(ctx context.Context) (Exit, error) {
	exit, err := v.machine.Wait(ctx)
	if err != nil {
		return exit, err
	}
	if fe := v.fileServerFailure(); fe != nil {
		return *fe, nil
	}
	if v.cgroup != nil && exit.Reason != "Completed" && v.cgroup.OOMKilled() {
		exit = Exit{Status: 128 + uint32(unix.SIGKILL), Reason: "OOMKilled",
			Message: "QEMU was OOM-killed: the guest's memory and the VM's overhead did not fit the container's limit"}
	}
	return exit, nil
}

// Shutdown presses the ACPI power button; the guest decides when it powers
// off.
func (v *VM) Shutdown(ctx context.Context) error { return v.machine.Shutdown(ctx) }

// Kill stops the VM hard.
func (v *VM) Kill(ctx context.Context) error { return v.machine.Kill(ctx) }

// Stop shuts the guest down and waits up to grace for it to power off,
// then stops it hard: a CRI StopContainer with its timeout. A VM that is
// not running (never started, or stopped already) returns at once, with
// its exit if it had one. The ACPI power button is pressed again every
// shutdownRepress within the grace: a guest still booting loses a press
// made before it listens for the button (the test guest's acpid starts
// a few seconds in), and a VM stopped soon after its start would
// otherwise wait out the whole grace.
func (v *VM) Stop(ctx context.Context, grace time.Duration) (Exit, error) {
	exit, err := shutdownWithin(ctx, grace, v.Shutdown, v.Wait)
	switch {
	case errors.Is(err, errNotRunning):
		exit, _ := v.machine.Exited()
		return exit, nil
	case errors.Is(err, errGraceOver):
		if err := v.Kill(ctx); err != nil {
			// It stopped on its own meanwhile (and may be deleted).
			if exit, stopped := v.machine.Exited(); stopped {
				return exit, nil
			}
			return Exit{}, err
		}
		return v.Wait(ctx)
	case err != nil:
		return Exit{}, err
	}
	return exit, nil
}

// shutdownRepress is how often Stop presses the power button again (a
// variable for the tests).
var shutdownRepress = 5 * time.Second

var (
	errNotRunning = errors.New("the VM does not run")
	errGraceOver  = errors.New("the VM did not stop within the grace period")
)

// shutdownWithin presses the power button (press) and waits (wait) up to
// grace for the VM to stop, pressing again every shutdownRepress
// (pressUntilStopped). It fails with errNotRunning when the first press
// finds no running VM (NotFound, FailedPrecondition), errGraceOver when
// the grace passed, press's other errors, or ctx's.
func shutdownWithin(ctx context.Context, grace time.Duration, press func(context.Context) error,
	wait func(context.Context) (Exit, error)) (Exit, error) {
	if err := press(ctx); err != nil {
		if notRunning(err) {
			return Exit{}, errNotRunning
		}
		return Exit{}, err
	}
	gctx, cancel := context.WithTimeout(ctx, grace)
	defer cancel()
	exit, err := pressUntilStopped(gctx, press, wait)
	if err != nil && ctx.Err() == nil && gctx.Err() != nil {
		return Exit{}, errGraceOver
	}
	return exit, err
}

// pressUntilStopped waits for the VM to stop after a press, pressing again
// every shutdownRepress, until it stops (its exit) or ctx ends (ctx's
// error). A press that finds the VM not running is no error: its stop is
// on its way; another error of press ends it.
func pressUntilStopped(ctx context.Context, press func(context.Context) error,
	wait func(context.Context) (Exit, error)) (Exit, error) {
	for {
		wctx, cancel := context.WithTimeout(ctx, shutdownRepress)
		exit, err := wait(wctx)
		cancel()
		if err == nil {
			return exit, nil
		}
		if ctx.Err() != nil {
			return Exit{}, ctx.Err()
		}
		if err := press(ctx); err != nil && !notRunning(err) {
			return Exit{}, err
		}
	}
}

// notRunning says a press found no running VM.
func notRunning(err error) bool { return errdefs.IsNotFound(err) || errdefs.IsFailedPrecondition(err) }

// PressUntilStopped follows a Shutdown: it waits for the VM to stop,
// pressing the power button again every shutdownRepress, and returns its
// exit, or ctx's error once ctx ends. A guest still booting loses a press
// made before it listens for the button; Stop presses again for that
// reason, and a front door whose caller owns the grace period
// (containerd's SIGTERM, then SIGKILL at its end) runs this after its
// Shutdown, for as long as it likes.
func (v *VM) PressUntilStopped(ctx context.Context) (Exit, error) {
	return pressUntilStopped(ctx, v.Shutdown, v.Wait)
}

// PID is QEMU's process id, 0 when the VM does not run.
func (v *VM) PID(ctx context.Context) (int, error) {
	if v.machine == nil {
		return 0, nil
	}
	return v.machine.PID(ctx)
}

// Suspend stops the guest's vCPUs; Resume lets them run again.
func (v *VM) Suspend(ctx context.Context) error { return v.machine.Suspend(ctx) }

// Resume lets a suspended guest run again.
func (v *VM) Resume(ctx context.Context) error { return v.machine.Resume(ctx) }

// Exec runs a command in the guest through its agent (Machine.Exec).
func (v *VM) Exec(ctx context.Context, req ExecRequest) (ExecResult, error) {
	return v.machine.Exec(ctx, req)
}

// PingAgent is nil when the guest agent answers a ping
// (Machine.PingAgent).
func (v *VM) PingAgent(ctx context.Context) error { return v.machine.PingAgent(ctx) }

// ConsoleInput is where to write to the serial console (attach); nil
// before Start or without a console.
func (v *VM) ConsoleInput() io.Writer { return v.machine.ConsoleInput() }

// ConsoleDone is closed once the guest's last console output was copied.
func (v *VM) ConsoleDone() <-chan struct{} { return v.machine.ConsoleDone() }

// Stats are the cgroup metrics of QEMU's cgroup (containerd's cgroups v1
// or v2 Metrics message), for the kubelet's summary: CPU and memory of
// the VM as a whole.
func (v *VM) Stats() (any, error) {
	if v.cgroup == nil {
		return nil, fmt.Errorf("the VM %s has not started, so it has no cgroup yet: %w", v.spec.Name, errdefs.ErrNotFound)
	}
	return v.cgroup.Stats()
}

// Abandon lets go of the VM as a process that dies does, without stopping
// it: its console connection and DHCP server close and its Runtime
// forgets its Machine, while the domain, QEMU, the tap, QEMU's cgroup and
// the record stay for the next process's Adopt. Nothing of the VM works
// through v afterwards.
func (v *VM) Abandon() {
	if v.net != nil {
		v.net.Abandon() //nolint:errcheck // the next process starts its own
		v.net = nil
	}
	m := v.machine
	if m == nil {
		return
	}
	m.mu.Lock()
	c := m.console
	m.console = nil
	m.mu.Unlock()
	if c != nil {
		c.close()
		<-c.done
	}
	m.rt.remove(m)
	v.machine = nil
}

// Delete removes the VM and all it holds, in reverse order: the in-process
// parts first (the machine with its console, the DHCP server), then
// through Undo what Held names, as the cleanup after a dead front door
// does from its record. Safe on a partly created VM and twice. When the
// undo is complete, Record is told nothing is held.
func (v *VM) Delete(ctx context.Context) error {
	var errs []error
	if v.machine != nil && !v.machineGone {
		errs = append(errs, v.machine.Delete(ctx))
		v.machineGone = true
	}
	if v.net != nil {
		errs = append(errs, v.net.Close())
		v.net = nil
	}
	errs = append(errs, v.stopFileServers())
	held := v.held
	if v.hv == nil {
		held.Domain = "" // never connected: no domain was made
	}
	if err := Undo(ctx, v.hv, held); err != nil {
		return errors.Join(append(errs, err)...)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	v.held = Held{}
	return v.save()
}
