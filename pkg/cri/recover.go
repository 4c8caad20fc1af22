package cri

import (
	"context"
	"fmt"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"

	"github.com/vmpod/vmpod/pkg/virt"
	"github.com/vmpod/vmpod/pkg/vm"
)

// recover reads the checkpoints an earlier server left. Sandboxes come
// back as they were (a namespace that is gone makes the sandbox not
// ready). A running container's VM is taken over (vm.Adopt): it keeps
// running, its console goes on into the same log, and its stop is waited
// for as if this server had started it; one that stopped meanwhile
// reports its exit. Any other VM that still holds something (a container
// created but not started, or one whose takeover failed) has that undone
// (vm.Undo: QEMU stopped, domain, cgroup, tap, device nodes) and is
// reported exited with the reason. A bad checkpoint is logged and skipped.
func (s *Server) recover(ctx context.Context) {
	sbs, errs := readCheckpoints[sandboxRecord](s.cfg.sandboxCkptDir())
	for _, err := range errs {
		log.G(ctx).WithError(err).Warn("skip a sandbox checkpoint")
	}
	for _, rec := range sbs {
		sb := newSandbox(s.cfg, rec)
		if rec.Netns != "" && !exists(rec.Netns) {
			if err := sb.update(func(r *sandboxRecord) error { r.Netns, r.IPs, r.State = "", nil, sandboxNotReady; return nil }); err != nil {
				log.G(ctx).WithError(err).Warnf("sandbox %s", rec.ID)
			}
		}
		s.sandboxes[rec.ID] = sb
		s.names[sandboxName(rec)] = rec.ID
	}

	cs, errs := readCheckpoints[containerRecord](s.cfg.containerCkptDir())
	for _, err := range errs {
		log.G(ctx).WithError(err).Warn("skip a container checkpoint")
	}
	for _, rec := range cs {
		c := newContainer(s.cfg, rec)
		s.containers[rec.ID] = c
		if sb := s.sandboxes[rec.SandboxID]; sb != nil {
			s.names[containerName(rec, sb.get())] = rec.ID
		}
		if rec.State == containerRunning && rec.Held.Domain != "" {
			err := s.adopt(ctx, c)
			if err == nil {
				log.G(ctx).Infof("container %s: took its running VM %s over", rec.ID, rec.Held.Domain)
				continue
			}
			log.G(ctx).WithError(err).Warnf("container %s: take its VM over", rec.ID)
			if err := s.undoLeftover(ctx, c, "AdoptFailed",
				fmt.Sprintf("vm-runtime cri restarted and could not take the running VM over, so it stopped it: %v", err)); err != nil {
				log.G(ctx).WithError(err).Errorf("container %s: undo what its VM held (its checkpoint keeps it)", rec.ID)
			}
			continue
		}
		if err := s.undoLeftover(ctx, c, "RuntimeRestarted",
			"vm-runtime cri restarted and removed the VM: it takes over running VMs only, and this one had not started"); err != nil {
			log.G(ctx).WithError(err).Errorf("container %s: undo what its VM held (its checkpoint keeps it)", rec.ID)
		}
	}
}

// adopt takes over the running VM of c, in its pod's network namespace,
// with its console going on into the container's log, and waits for its
// end as StartContainer does. On error vm.Adopt has undone what it could.
func (s *Server) adopt(ctx context.Context, c *container) error {
	rec := c.get()
	if rec.Spec == nil {
		return errorf(errdefs.ErrFailedPrecondition, "its checkpoint holds no VM spec (an earlier server wrote it)")
	}
	sb := s.sandboxes[rec.SandboxID]
	if sb == nil {
		return errorf(errdefs.ErrNotFound, "its sandbox %s has no checkpoint", rec.SandboxID)
	}
	sbRec := sb.get()
	if sbRec.Netns == "" {
		return errorf(errdefs.ErrFailedPrecondition, "its sandbox %s has no network namespace any more", sbRec.ID)
	}
	env, err := s.hypervisor(ctx)
	if err != nil {
		return err
	}
	clog, err := openCRILog(rec.LogPath)
	if err != nil {
		return errorf(errdefs.ErrInternal, "container log: %v", err)
	}
	console := newConsoleOut(clog)
	req := vm.AdoptRequest{
		Spec:       *rec.Spec,
		Layout:     s.layout(sbRec.ID),
		Network:    s.podNetwork(sbRec),
		Held:       rec.Held,
		ConsoleOut: console,
		Record:     c.record,
	}
	var v *vm.VM
	if err := inNetns(sbRec.Netns, func() error {
		var err error
		v, err = vm.Adopt(ctx, req, opener(env))
		return err
	}); err != nil {
		clog.Close()
		return err
	}
	c.vm, c.log, c.console = v, clog, console
	c.exited = make(chan struct{})
	c.live.start(v)
	go s.wait(c)
	return nil
}

// undoLeftover stops and removes what the container's VM still holds, and
// records the container exited, with reason and message unless it had
// exited before.
func (s *Server) undoLeftover(ctx context.Context, c *container, reason, message string) error {
	rec := c.get()
	if !rec.Held.Empty() {
		var hv virt.Hypervisor
		if rec.Held.Domain != "" {
			if _, err := s.hypervisor(ctx); err != nil {
				return err
			}
			s.hvMu.Lock()
			hv = s.conn
			s.hvMu.Unlock()
		}
		if err := vm.Undo(ctx, hv, rec.Held); err != nil {
			return err
		}
	}
	if rec.State == containerExited && rec.Held.Empty() {
		return nil
	}
	return c.update(func(r *containerRecord) error {
		r.Held = vm.Held{}
		if r.State != containerExited {
			r.State, r.FinishedAt, r.ExitCode = containerExited, time.Now().UnixNano(), 137
			r.Reason, r.Message = reason, message
		}
		return nil
	})
}
