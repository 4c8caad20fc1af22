package vmd

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/vmpod/vmpod/pkg/podcgroup"
	"github.com/vmpod/vmpod/pkg/vm"
	"github.com/vmpod/vmpod/pkg/vmspec"
)

// CreateRequest is one VM a front door asks for: vm.Request less what
// the node decides (the pod's layout, QEMU's jail, the hypervisor).
type CreateRequest struct {
	// ID names the VM on the node (the container's id); PodID its pod,
	// whose dir and QEMU uid it uses.
	ID, PodID string
	// Namespace and PodName name the Kubernetes pod (for metrics).
	Namespace, PodName string
	Spec               vmspec.Spec
	// Rootfs is the containerdisk's root on the host; RootfsMounts, if
	// any, are mounted on it first (vm.Request).
	Rootfs       string
	RootfsMounts []mount.Mount
	// Network is the pod network the VM takes over; its namespace is
	// where the VM is attached and started.
	Network      vm.Network
	BlockDevices []vm.BlockDevice
	ShareSources map[string]string
	CloudInitDir string
	InstanceID   string
	Cgroup       podcgroup.Path
	CPU          *specs.LinuxCPU
	OOMScoreAdj  *int
	// Console receives the serial console from its first byte (nil: the
	// console log only).
	Console io.Writer
	// From is a checkpoint dir on the node (Checkpoint's) to restore the
	// VM from instead of booting it: the CRI's RestorePod. It must be
	// signed by a key the node trusts, as a checkpoint image's is, and
	// stay until Start, which loads its state.
	From string
}

// Create makes the VM up to a defined, not yet started domain (vm.Create).
// Nothing of it runs in the pod's network namespace but pkg/vm's pod
// network steps, on threads of their own: libvirt never enters a pod's.
// A VM of that id already on the node is AlreadyExists. On error nothing
// of it is left, record included; a state root that is full or read-only
// makes the error ResourceExhausted (FailedPrecondition) naming it and
// its free bytes (vm.StorageError).
func (s *Service) Create(ctx context.Context, req CreateRequest) (retErr error) {
	defer func() { retErr = vm.StorageError(retErr, s.cfg.StateRoot) }() // runs last: after the undo
	if req.ID == "" || req.PodID == "" {
		return errorf(errdefs.ErrInvalidArgument, "create a VM: id %q and pod %q must both be set", req.ID, req.PodID)
	}
	in := newInstance(s.cfg, Record{ID: req.ID, PodID: req.PodID, Namespace: req.Namespace, Pod: req.PodName, Spec: req.Spec, Netns: req.Network.Netns,
		ResolvConf: req.Network.ResolvConf, Hostname: req.Network.Hostname, State: Created, CreatedAt: time.Now().UnixNano()})
	if err := in.Begin("create", nil); err != nil {
		return err
	}
	defer in.End()
	s.mu.Lock()
	if _, dup := s.vms[req.ID]; dup {
		s.mu.Unlock()
		return errorf(errdefs.ErrAlreadyExists, "VM %s", req.ID)
	}
	s.vms[req.ID] = in
	s.mu.Unlock()
	defer func() {
		if retErr != nil {
			s.forget(in)
		}
	}()
	if err := in.Update(func(*Record) error { return nil }); err != nil {
		return err
	}
	defer func() {
		if retErr != nil {
			if err := in.Remove(); err != nil {
				log.G(ctx).WithError(err).Warnf("VM %s: remove the checkpoint of a failed create", req.ID)
			}
		}
	}()

	if req.From != "" {
		if err := vm.VerifyCheckpoint(req.From, s.cfg.TrustKeys); err != nil {
			return fmt.Errorf("VM %s: restore from %s: %w", req.ID, req.From, err)
		}
	}
	if err := s.waitPredecessor(ctx, req.ID, req.Spec.Name); err != nil {
		return err
	}
	// libvirt opens here, in this process's namespace, not the pod's.
	env, err := s.hypervisor(ctx)
	if err != nil {
		return err
	}
	j, err := s.jail(req.PodID)
	if err != nil {
		return err
	}
	vreq := vm.Request{
		Spec: req.Spec, Layout: s.Layout(req.PodID), Jail: j,
		Rootfs: req.Rootfs, RootfsMounts: req.RootfsMounts, Network: req.Network,
		BlockDevices: req.BlockDevices, ShareSources: req.ShareSources, CloudInitDir: req.CloudInitDir, InstanceID: req.InstanceID,
		Cgroup: req.Cgroup, CPU: req.CPU, OOMScoreAdj: req.OOMScoreAdj,
		ConsoleOut: req.Console, Record: in.record, Trust: s.cfg.TrustKeys, From: req.From,
		DefaultMaxVCPUs: s.cfg.DefaultMaxVCPUs,
	}
	in.vm, err = vm.Create(ctx, vreq, opener(env))
	return err
}

// predecessorWait bounds Create's wait for an earlier VM of the same pod.
var predecessorWait = 30 * time.Second

// waitPredecessor waits, up to predecessorWait, until no other VM of the
// node holds the domain name (a pod's VM is named after the pod): the
// pod's earlier VM, when its shim died and the kubelet makes the sandbox
// and container again while containerd is still removing the old ones.
// Past the wait it is Unavailable, which the kubelet retries. An earlier
// VM that stopped holds its domain no more (its stop deleted it).
func (s *Service) waitPredecessor(ctx context.Context, id, domain string) error {
	ctx, cancel := context.WithTimeout(ctx, predecessorWait)
	defer cancel()
	for {
		other := s.holding(domain, id)
		if other == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return errorf(errdefs.ErrUnavailable, "VM %s: VM %s of the same pod still holds the domain %s; it goes when its container is removed",
				id, other, domain)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// holding is the id of a VM other than id that holds the domain name, ""
// for none.
func (s *Service) holding(domain, id string) string {
	for _, in := range s.snapshot() {
		if r := in.Get(); r.ID != id && r.Held.Domain == domain {
			return r.ID
		}
	}
	return ""
}

// forget drops in from the node's table.
func (s *Service) forget(in *instance) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.vms[in.id] == in {
		delete(s.vms, in.id)
	}
}

// Start boots a created VM and returns QEMU's pid (QEMU runs in the pod's
// network namespace, which its jailer enters). From then on the VM's stop
// is waited for: its console drained, the VM deleted, its exit recorded
// (Wait). A full or read-only state root is said as Create says it.
func (s *Service) Start(ctx context.Context, id string) (_ int, retErr error) {
	defer func() { retErr = vm.StorageError(retErr, s.cfg.StateRoot) }()
	in, err := s.get(id)
	if err != nil {
		return 0, err
	}
	if err := in.Begin("start", func(r Record) error {
		if r.State != Created || in.vm == nil {
			return errorf(errdefs.ErrFailedPrecondition, "VM %s is %s, not created", r.ID, r.State)
		}
		return nil
	}); err != nil {
		return 0, err
	}
	defer in.End()
	pid, err := in.vm.Start(ctx)
	s.metrics.started(in.vm.Phases(), err)
	if err != nil {
		return 0, err
	}
	s.running(ctx, in)
	log.G(ctx).WithField("phases", in.vm.Phases().String()).WithField("start_memory", in.vm.StartMemory()).Infof("VM %s started", id)
	s.trimMalloc()
	return pid, nil
}

// running lends the started (or adopted) VM out and waits for its stop.
func (s *Service) running(ctx context.Context, in *instance) {
	in.live.start(in.vm)
	if err := in.Update(func(r *Record) error {
		if r.State != Running {
			r.State, r.StartedAt = Running, time.Now().UnixNano()
		}
		return nil
	}); err != nil {
		log.G(ctx).WithError(err).Warnf("VM %s runs, but its checkpoint says not", in.id)
	}
	go s.wait(in)
}

// consoleDrain bounds the wait for the guest's last console lines after
// its VM stopped.
const consoleDrain = 2 * time.Second

// wait turns the VM's end into its exit: the last console lines out, what
// still uses the VM ended, the VM deleted with all it holds, the exit
// recorded.
func (s *Service) wait(in *instance) {
	ctx := context.Background()
	v := in.vm
	exit, err := v.Wait(ctx)
	if err != nil {
		log.G(ctx).WithError(err).Errorf("VM %s: wait", in.id)
	}
	select {
	case <-v.ConsoleDone():
	case <-time.After(consoleDrain):
	}
	// Exec, the console and stats give the VM back before it goes.
	in.live.stop()
	if err := v.Delete(ctx); err != nil {
		log.G(ctx).WithError(err).Errorf("VM %s: delete the stopped VM (its checkpoint keeps what is left)", in.id)
	}
	s.stopped(ctx, in, exitOf(exit))
	s.metrics.exits.WithLabelValues(exit.Reason).Inc()
	log.G(ctx).Infof("VM %s exited: %d %s: %s", in.id, exit.Status, exit.Reason, exit.Message)
}

// stopped records the exit and tells Wait.
func (s *Service) stopped(ctx context.Context, in *instance, exit Exit) {
	if err := in.Update(func(r *Record) error {
		r.State, r.FinishedAt, r.Exit = Stopped, time.Now().UnixNano(), exit
		return nil
	}); err != nil {
		log.G(ctx).WithError(err).Errorf("VM %s: record its exit", in.id)
	}
	select {
	case <-in.stopped:
	default:
		close(in.stopped)
	}
}

// Wait returns the VM's exit once it stopped and holds nothing, or ctx's
// error. A created VM is waited for until it is started and stops, or is
// stopped without starting.
func (s *Service) Wait(ctx context.Context, id string) (Exit, error) {
	in, err := s.get(id)
	if err != nil {
		return Exit{}, err
	}
	select {
	case <-in.stopped:
		return in.Get().Exit, nil
	case <-ctx.Done():
		return Exit{}, ctx.Err()
	}
}

// Stop presses the VM's ACPI power button, presses it again while the
// guest boots, stops it hard once grace has passed, and returns when the
// VM stopped and holds nothing. A created VM is deleted and stopped with
// Reason NotStarted; a stopped one is no error.
func (s *Service) Stop(ctx context.Context, id string, grace time.Duration) error {
	in, err := s.get(id)
	if err != nil {
		return err
	}
	if err := in.Begin("stop", nil); err != nil {
		return err
	}
	defer in.End()
	switch in.Get().State {
	case Stopped:
		return nil
	case Created:
		return s.stopCreated(ctx, in, Exit{Reason: "NotStarted"})
	}
	if in.vm == nil {
		return errorf(errdefs.ErrInternal, "VM %s runs, but this process holds no VM for it", id)
	}
	if _, err := in.vm.Stop(ctx, grace); err != nil {
		return err
	}
	select {
	case <-in.stopped:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stopCreated deletes a VM that never started and records exit.
func (s *Service) stopCreated(ctx context.Context, in *instance, exit Exit) error {
	if in.vm != nil {
		if err := in.vm.Delete(ctx); err != nil {
			return err
		}
	}
	s.stopped(ctx, in, exit)
	return nil
}

// shutdownPressFor bounds how long a Shutdown's power button is pressed
// again: past the grace period a kubelet gives by default (30 s) and any
// guest's boot, after which one press is heard.
const shutdownPressFor = 10 * time.Minute

// Shutdown presses the VM's ACPI power button and returns; the button is
// pressed again in the background until the VM stops (for at most
// shutdownPressFor), as a guest still booting loses a press. The caller
// owns the grace period: it calls Kill when it ends (containerd's SIGTERM,
// then SIGKILL). One pressing loop per VM, however many calls come.
func (s *Service) Shutdown(ctx context.Context, id string) error {
	return s.withVM(id, func(in *instance, v *vm.VM) error { return s.shutdown(ctx, in, v) })
}

func (s *Service) shutdown(ctx context.Context, in *instance, v *vm.VM) error {
	if err := v.Shutdown(ctx); err != nil {
		return err
	}
	if !in.pressing.CompareAndSwap(false, true) {
		return nil
	}
	go func() {
		defer in.pressing.Store(false)
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownPressFor)
		defer cancel()
		if _, err := v.PressUntilStopped(ctx); err != nil && ctx.Err() == nil {
			log.G(ctx).WithError(err).Warnf("VM %s: pressing the power button again", in.id)
		}
	}()
	return nil
}

// Kill stops the VM hard and returns; Wait reports the exit. A created
// VM is deleted and stopped with exit, at once; a stopped one is no
// error.
func (s *Service) Kill(ctx context.Context, id string, exit Exit) error {
	in, err := s.get(id)
	if err != nil {
		return err
	}
	if v, _, release, err := in.use(); err == nil {
		defer release()
		return v.Kill(ctx)
	}
	if err := in.Begin("kill", nil); err != nil {
		return err
	}
	defer in.End()
	switch in.Get().State {
	case Created:
		return s.stopCreated(ctx, in, exit)
	case Stopped:
		return nil
	}
	// It started meanwhile: kill it as above.
	v, _, release, err := in.use()
	if err != nil {
		return nil // and stopped
	}
	defer release()
	return v.Kill(ctx)
}

// Remove stops the VM hard if it runs and forgets it, checkpoint and
// all. NotFound if the node has no VM of that id.
func (s *Service) Remove(ctx context.Context, id string) error {
	if err := s.Stop(ctx, id, 0); err != nil {
		return err
	}
	in, err := s.get(id)
	if err != nil {
		return err
	}
	if err := in.Begin("remove", nil); err != nil {
		return err
	}
	// Not ended: a removed VM stays busy for whoever still holds it.
	if r := in.Get(); !r.Held.Empty() {
		in.End()
		return errorf(errdefs.ErrFailedPrecondition, "VM %s: it still holds %+v", r.ID, r.Held)
	}
	if err := in.Remove(); err != nil {
		in.End()
		return err
	}
	s.forget(in)
	s.trimMalloc()
	return nil
}

// Pause stops the guest's vCPUs; Resume lets them run again.
func (s *Service) Pause(ctx context.Context, id string) error {
	return s.withVM(id, func(_ *instance, v *vm.VM) error { return v.Suspend(ctx) })
}

// Resume lets a paused guest run again.
func (s *Service) Resume(ctx context.Context, id string) error {
	return s.withVM(id, func(_ *instance, v *vm.VM) error { return v.Resume(ctx) })
}

// Checkpoint writes the running VM's state into dir (vm.VM.Checkpoint),
// signed with the node's key if it has one; the VM runs on.
func (s *Service) Checkpoint(ctx context.Context, id, dir string) (vm.CheckpointResult, error) {
	var res vm.CheckpointResult
	err := s.withVM(id, func(_ *instance, v *vm.VM) error {
		var err error
		if res, err = v.Checkpoint(ctx, dir); err != nil || s.cfg.SigningKey == nil {
			return err
		}
		return vm.SignCheckpoint(dir, s.cfg.SigningKey)
	})
	return res, err
}

// Update applies new resources to the running VM (vm.VM.Update), live.
func (s *Service) Update(ctx context.Context, id string, r *specs.LinuxResources) error {
	return s.withVM(id, func(_ *instance, v *vm.VM) error { return v.Update(ctx, r) })
}

// Stats are the running VM's cgroup metrics (vm.VM.Stats) and when they
// were read.
func (s *Service) Stats(id string) (any, time.Time, error) {
	var m any
	var at time.Time
	err := s.withVM(id, func(_ *instance, v *vm.VM) error {
		var err error
		m, err = v.Stats()
		at = time.Now()
		return err
	})
	if err != nil {
		return nil, at, fmt.Errorf("VM %s: %w", id, err)
	}
	return m, at, nil
}

// ConsoleInput is where to write to the running VM's serial console;
// FailedPrecondition without one.
func (s *Service) ConsoleInput(id string) (io.Writer, error) {
	var w io.Writer
	err := s.withVM(id, func(_ *instance, v *vm.VM) error {
		if w = v.ConsoleInput(); w == nil {
			return errorf(errdefs.ErrFailedPrecondition, "VM %s has no serial console", id)
		}
		return nil
	})
	return w, err
}

// withVM runs f with the running VM, which stays lent out until f returns.
func (s *Service) withVM(id string, f func(*instance, *vm.VM) error) error {
	in, err := s.get(id)
	if err != nil {
		return err
	}
	v, _, release, err := in.use()
	if err != nil {
		return err
	}
	defer release()
	return f(in, v)
}
