package cri

import (
	"context"
	"time"

	"github.com/containerd/log"

	"github.com/vmpod/vmpod/pkg/virt"
	"github.com/vmpod/vmpod/pkg/vm"
)

// recover reads the checkpoints an earlier server left. Sandboxes come
// back as they were (a namespace that is gone makes the sandbox not
// ready). A container whose VM still holds something has that undone
// (vm.Undo: QEMU stopped, domain, cgroup, tap, device nodes) and is
// reported exited: this server cannot take over a running VM yet, and a
// VM it does not manage must not outlive its record. A bad checkpoint is
// logged and skipped.
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
		if err := s.undoLeftover(ctx, c); err != nil {
			log.G(ctx).WithError(err).Errorf("container %s: undo what its VM held (its checkpoint keeps it)", rec.ID)
		}
		s.containers[rec.ID] = c
		if sb := s.sandboxes[rec.SandboxID]; sb != nil {
			s.names[containerName(rec, sb.get())] = rec.ID
		}
	}
}

// undoLeftover stops and removes what the container's VM still holds, and
// records the container exited.
func (s *Server) undoLeftover(ctx context.Context, c *container) error {
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
			r.Reason = "RuntimeRestarted"
			r.Message = "vm-runtime cri restarted and stopped the VM: it cannot take over a running VM yet"
		}
		return nil
	})
}
