package vmd

import (
	"context"
	"fmt"
	"io"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"

	"github.com/vmpod/vmpod/internal/ckpt"
	"github.com/vmpod/vmpod/pkg/virt"
	"github.com/vmpod/vmpod/pkg/vm"
)

// Recover reads the checkpoints an earlier process left, once, before any
// other call. A running VM is taken over (vm.Adopt, in its pod's
// namespace): it keeps running, its console goes on into the writer
// consoleFor gives, and its stop is waited for as if this process had
// started it; one that stopped meanwhile reports its exit. Any other VM
// that still holds something (created but never started, or one whose
// takeover failed) has that undone (vm.Undo), anything still running as
// its pod's QEMU uid killed (vm.KillOrphans), and is recorded stopped,
// 137, with the reason (RuntimeRestarted, AdoptFailed). A bad checkpoint
// is logged and skipped; nothing here is fatal.
func (s *Service) Recover(ctx context.Context, consoleFor func(Record) (io.Writer, error)) {
	recs, errs := ckpt.ReadAll[Record](s.cfg.checkpointDir(), checkpointVersion)
	for _, err := range errs {
		log.G(ctx).WithError(err).Warn("skip a VM checkpoint")
	}
	for _, rec := range recs {
		in := newInstance(s.cfg, rec)
		s.mu.Lock()
		s.vms[rec.ID] = in
		s.mu.Unlock()
		switch {
		case rec.State == Running && rec.Held.Domain != "":
			err := s.adopt(ctx, in, consoleFor)
			if err == nil {
				s.metrics.recovered.WithLabelValues("adopted").Inc()
				log.G(ctx).Infof("VM %s: took it over, still running", rec.ID)
				continue
			}
			log.G(ctx).WithError(err).Warnf("VM %s: take it over", rec.ID)
			s.metrics.recovered.WithLabelValues("undone").Inc()
			s.undoLeftover(ctx, in, "AdoptFailed",
				fmt.Sprintf("vm-runtime restarted and could not take the running VM over, so it stopped it: %v", err))
		case rec.State == Stopped:
			s.undoLeftover(ctx, in, "", "")
		default:
			s.metrics.recovered.WithLabelValues("undone").Inc()
			s.undoLeftover(ctx, in, "RuntimeRestarted",
				"vm-runtime restarted and removed the VM: it takes over running VMs only, and this one had not started")
		}
	}
}

// adopt takes the running VM of in's record over.
func (s *Service) adopt(ctx context.Context, in *instance, consoleFor func(Record) (io.Writer, error)) error {
	rec := in.Get()
	if rec.Netns == "" && len(rec.Spec.NICs) > 0 {
		return errorf(errdefs.ErrFailedPrecondition, "its pod's network namespace is not recorded")
	}
	env, err := s.hypervisor(ctx)
	if err != nil {
		return err
	}
	var console io.Writer
	if consoleFor != nil {
		if console, err = consoleFor(rec); err != nil {
			return errorf(errdefs.ErrInternal, "its console: %v", err)
		}
	}
	req := vm.AdoptRequest{Spec: rec.Spec, Layout: s.Layout(rec.PodID), Network: rec.network(), Held: rec.Held,
		ConsoleOut: console, Record: in.record}
	if in.vm, err = vm.Adopt(ctx, req, opener(env)); err != nil {
		return err
	}
	s.running(ctx, in)
	return nil
}

// undoLeftover removes what in's VM still holds and records it stopped:
// with 137, reason and message unless it had stopped before. A failure
// is logged; the checkpoint keeps what is left for a later try.
func (s *Service) undoLeftover(ctx context.Context, in *instance, reason, message string) {
	rec := in.Get()
	if !rec.Held.Empty() {
		var hv virt.Hypervisor
		if rec.Held.Domain != "" {
			if _, err := s.hypervisor(ctx); err != nil {
				log.G(ctx).WithError(err).Errorf("VM %s: open the hypervisor to undo what it holds (its checkpoint keeps it)", rec.ID)
				return
			}
			s.hvMu.Lock()
			hv = s.conn
			s.hvMu.Unlock()
		}
		if err := vm.Undo(ctx, hv, rec.Held); err != nil {
			log.G(ctx).WithError(err).Errorf("VM %s: undo what it holds (its checkpoint keeps it)", rec.ID)
			return
		}
	}
	if rec.State != Stopped {
		// A QEMU of the pod that outlived what the hypervisor knows
		// would run beside the pod's next one, as the same uid.
		if err := vm.KillOrphans(s.cfg.StateRoot, s.Layout(rec.PodID)); err != nil {
			log.G(ctx).WithError(err).Errorf("VM %s: kill what still runs as its QEMU's uid (its checkpoint keeps it)", rec.ID)
			return
		}
	}
	exit := rec.Exit
	if rec.State != Stopped {
		exit = Exit{Status: 137, Reason: reason, Message: message}
	}
	if err := in.Update(func(r *Record) error { r.Held = vm.Held{}; return nil }); err != nil {
		log.G(ctx).WithError(err).Errorf("VM %s: record that it holds nothing", rec.ID)
	}
	s.stopped(ctx, in, exit)
}
