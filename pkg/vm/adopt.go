package vm

import (
	"context"
	"fmt"
	"io"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"

	"github.com/vmpod/vmpod/internal/nsthread"
	"github.com/vmpod/vmpod/pkg/podcgroup"
	"github.com/vmpod/vmpod/pkg/podnet"
	"github.com/vmpod/vmpod/pkg/virt"
	"github.com/vmpod/vmpod/pkg/vmspec"
)

// AdoptRequest is a VM that an earlier process of a front door created and
// started, as that process recorded it, for the front door's next process
// to take over (Adopt). Everything in it is what the front door
// checkpointed or can derive again: the spec it created the VM from, the
// pod's layout and network, and the last Held Record reported.
type AdoptRequest struct {
	Spec    vmspec.Spec
	Layout  Layout
	Network Network
	// Held is what the VM held when the earlier process last recorded it:
	// the domain, the tap, the cgroup.
	Held Held
	// ConsoleOut receives the serial console from now on (nil: the log
	// only); the console log goes on after what it holds.
	ConsoleOut      io.Writer
	ConsoleLogBytes int64
	// Record is Request.Record, for what the adopted VM holds from now on.
	Record func(Held) error
}

// Adopt takes over a VM that an earlier process made with Create and
// started, and that may still run: a Machine for its existing domain,
// registered with the Env's Runtime so its stop reaches Wait; the serial
// console connected again (output the guest wrote while nobody was
// connected is lost, the log keeps what it had); the pod network's DHCP
// server started again on the tap (podnet.Reattach), on a thread in the
// pod's network namespace; and
// QEMU's cgroup loaded again for Stats, Update and the OOM check. A domain
// that no longer runs is adopted too: its VM reports the exit (Wait) and
// then goes with Delete as any other.
//
// The adopted VM is a created and started one: Wait, Stop, Shutdown,
// Kill, Exec, the console, Stats, Update and Delete work on it alike;
// Start does not (it runs).
//
// On error what req.Held names is undone (Delete), and Record is told so,
// unless the Env could not be opened: then nothing is touched and the
// record stays as it was for a later undo.
func Adopt(ctx context.Context, req AdoptRequest, open Opener) (_ *VM, retErr error) {
	req.Network = req.Network.withDefaults(req.Spec.Name)
	h := req.Held
	if h.Domain == "" {
		return nil, fmt.Errorf("adopt %s: its record names no domain: %w", req.Spec.Name, errdefs.ErrFailedPrecondition)
	}
	env, err := open(ctx)
	if err != nil {
		return nil, err
	}
	// A VM restored from a checkpoint keeps the checkpoint's domain name.
	req.Spec.Name = h.Domain
	v := &VM{spec: req.Spec, layout: req.Layout, hv: env.Runtime.hv, host: env.Host, held: h, record: req.Record,
		limit: MemoryLimit(req.Spec, env.Host)}
	if h.Cgroup != "" {
		if v.cgPath, err = podcgroup.Parse(h.Cgroup); err != nil {
			return nil, fmt.Errorf("adopt %s: its cgroup %q: %v: %w", h.Domain, h.Cgroup, err, errdefs.ErrInternal)
		}
	}
	defer func() {
		if retErr != nil {
			if err := v.Delete(context.WithoutCancel(ctx)); err != nil {
				retErr = fmt.Errorf("%w (and its undo: %v)", retErr, err)
			}
		}
	}()

	v.machine, err = env.Runtime.adopt(ctx, h.Domain, req.Layout, req.Spec.Console, req.ConsoleOut, req.ConsoleLogBytes)
	if err != nil {
		return nil, err
	}
	if _, stopped := v.machine.Exited(); stopped {
		// Nothing more to take over: the VM reports its exit (the cgroup,
		// if still there, says whether the OOM killer ended it), and
		// Delete undoes what Held names, tap and cgroup included.
		if v.cgPath.Raw != "" {
			v.cgroup, _ = podcgroup.Load(v.cgPath)
		}
		return v, nil
	}
	if h.Tap != "" && len(req.Spec.NICs) > 0 {
		if v.net, err = reattachNetwork(req.Network, h.Tap); err != nil {
			return nil, err
		}
	}
	if v.cgPath.Raw != "" {
		if v.cgroup, err = podcgroup.Load(v.cgPath); err != nil {
			return nil, fmt.Errorf("adopt %s: QEMU's cgroup: %w", h.Domain, err)
		}
	}
	// The room to grow in vCPUs the node gave a VM whose pod set none
	// (withDefaultRoom), or a restored VM took from its checkpoint, is
	// in its domain, not in the record of what the pod asked.
	if v.spec.MaxVCPUs == 0 {
		if sz, err := v.hv.Size(ctx, h.Domain); err == nil && sz.MaxVCPUs > v.spec.VCPUs {
			v.spec.MaxVCPUs, v.defaultRoom = sz.MaxVCPUs, true
			v.limit = MemoryLimit(v.spec, env.Host)
		}
	}
	// A checkpoint the dead process left half done: the disk back on its
	// overlay, the guest running again. A failure keeps the VM (it runs,
	// on its top layer) and the mark, for the next checkpoint to finish.
	sctx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	if err := v.settleCheckpoint(sctx); err != nil {
		log.G(ctx).WithError(err).Warnf("adopt %s: finish the checkpoint its last process left undone", h.Domain)
	}
	return v, nil
}

// reattachNetwork starts the pod network's in-process part (the DHCP
// server) again on the tap an earlier process attached.
func reattachNetwork(n Network, tap string) (*podnet.Attachment, error) {
	pn, err := inspectNetwork(n)
	if err != nil {
		return nil, err
	}
	var a *podnet.Attachment
	err = nsthread.InNetns(n.Netns, func() error {
		var err error
		if a, err = podnet.Reattach(pn, tap); err != nil {
			return fmt.Errorf("pod network: %v: %w", err, errdefs.ErrFailedPrecondition)
		}
		return nil
	})
	return a, err
}

// adopt is a Machine for the existing domain name, laid out in l. It is
// registered before the domain's state is read, so a stop in between
// reaches it either way; a domain found not running has exited already.
// A running one gets its console (if it has one) connected again, its
// log kept.
func (rt *Runtime) adopt(ctx context.Context, name string, l Layout, console bool, out io.Writer, logBytes int64) (_ *Machine, retErr error) {
	m := &Machine{rt: rt, hv: rt.hv, name: name, layout: l, exited: make(chan struct{}),
		consoleOut: out, consoleLogBytes: logBytes}
	if console {
		m.consoleSocket = l.Console()
	}
	if err := rt.take(m); err != nil {
		return nil, err
	}
	defer func() {
		if retErr != nil {
			rt.remove(m)
			m.mu.Lock()
			m.qemu.close()
			m.qemu = nil
			m.mu.Unlock()
		}
	}()
	info, err := rt.hv.Info(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("adopt domain %q: %w", name, err)
	}
	if !info.State.Active() {
		m.stoppedUnwatched(info.Reason)
		return m, nil
	}
	m.watchQEMU(ctx, info)
	if m.consoleSocket != "" {
		c, err := attachConsole(m.consoleSocket, l.ConsoleLog(), logBytes, out, true)
		if err != nil {
			return nil, err
		}
		m.mu.Lock()
		m.console = c
		m.mu.Unlock()
	}
	if info.PausedOnIOError {
		// Paused on a full disk while no runtime watched: wait for
		// room as if the pause had just come.
		m.pausedOnIOError()
	}
	return m, nil
}

// stoppedUnwatched records the exit of a VM that stopped while no process
// watched it, from the reason the hypervisor kept.
func (m *Machine) stoppedUnwatched(r virt.StopReason) {
	if r == virt.StopCrashed {
		// libvirt records any QEMU exit it did not watch as crashed.
		r = virt.StopFailed
	}
	e := exitFor(r, false, 0, false)
	e.Message += " (while the runtime was not running)"
	m.finish(e)
}

// take registers m, unless a Machine of its name is registered already:
// one domain has one Machine.
func (rt *Runtime) take(m *Machine) error {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if _, ok := rt.machines[m.name]; ok {
		return fmt.Errorf("domain %q is managed in this process already: %w", m.name, errdefs.ErrAlreadyExists)
	}
	rt.machines[m.name] = m
	return nil
}
