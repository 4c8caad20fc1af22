package vmd

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

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

// orphanWait bounds how long ReleaseOrphans waits for the VMs of unserved
// pods that Recover found running to be recorded stopped.
var orphanWait = 5 * time.Second

// ReleaseOrphans removes, after Recover, the stopped VMs of the pods that
// owned says nobody serves any more (owned gets a sandbox id, or the
// first digits of one that name a pod's dir), and releases those pods (their dirs,
// their QEMU uid leases): nobody would ever ask for them. That is every
// VM of the node after a reboot, whose shims did not survive it and whose
// container runtime forgot them with /run. A running VM is left to its
// pod, whoever serves it. It returns the pods it released.
func (s *Service) ReleaseOrphans(ctx context.Context, owned func(podID string) bool) []string {
	var orphans []Record
	pods := map[string]bool{}
	for _, in := range s.snapshot() {
		if r := in.Get(); !owned(r.PodID) {
			orphans = append(orphans, r)
			pods[r.PodID] = true
		}
	}
	slices.SortFunc(orphans, func(a, b Record) int { return cmp.Compare(a.ID, b.ID) })
	// A VM taken over whose QEMU was gone is recorded stopped by its
	// wait, a moment after Recover: wait for that (bounded, together),
	// then read every record again: one may have stopped while another,
	// which runs on, was waited for.
	wctx, cancel := context.WithTimeout(ctx, orphanWait)
	defer cancel()
	for _, r := range orphans {
		if r.State != Stopped {
			_, _ = s.Wait(wctx, r.ID)
		}
	}
	for i, r := range orphans {
		if in, err := s.get(r.ID); err == nil {
			orphans[i] = in.Get()
		}
	}
	for _, r := range orphans {
		if r.State != Stopped {
			log.G(ctx).Warnf("VM %s of pod %s: no shim serves its pod, but it runs: left to its pod", r.ID, r.PodID)
			delete(pods, r.PodID)
			continue
		}
		if err := s.Remove(ctx, r.ID); err != nil && !errdefs.IsNotFound(err) {
			log.G(ctx).WithError(err).Warnf("VM %s of pod %s: no shim serves its pod; remove it", r.ID, r.PodID)
			delete(pods, r.PodID)
			continue
		}
		s.metrics.recovered.WithLabelValues("released").Inc()
		log.G(ctx).Infof("VM %s of pod %s: no shim serves its pod any more (a reboot?): removed", r.ID, r.PodID)
	}
	// A pod dir with no VM left in it (its containers removed, the
	// sandbox not yet released when the node went down) is named by the
	// first digits of its sandbox id.
	if dirs, err := os.ReadDir(filepath.Join(s.cfg.StateRoot, "pods")); err == nil {
		for _, d := range dirs {
			if !s.hasPod(d.Name(), pods) && !owned(d.Name()) {
				pods[d.Name()] = true
			}
		}
	}
	var released []string
	for pod := range pods {
		if err := s.ReleasePod(ctx, pod); err != nil {
			log.G(ctx).WithError(err).Warnf("pod %s: no shim serves it; release it", pod)
			continue
		}
		released = append(released, pod)
	}
	return released
}

// hasPod reports whether a VM of the node, or one of pods, is of a
// sandbox whose id begins with prefix.
func (s *Service) hasPod(prefix string, pods map[string]bool) bool {
	for p := range pods {
		if strings.HasPrefix(p, prefix) {
			return true
		}
	}
	for _, in := range s.snapshot() {
		if strings.HasPrefix(in.Get().PodID, prefix) {
			return true
		}
	}
	return false
}
