package cri

import (
	"context"
	"errors"
	"io"
	"os"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"

	"github.com/vmpod/vmpod/internal/ckpt"
	"github.com/vmpod/vmpod/pkg/vmd"
)

// recover reads the checkpoints an earlier server left. Sandboxes come
// back as they were (a namespace that is gone makes the sandbox not
// ready); the image volume links of a sandbox no checkpoint names are
// removed. Containers come back with their records, so an image a
// container mounts as a volume stays unremovable. The node's VM service takes each running VM over
// (vmd.Service.Recover), its console going on into its container's log,
// and undoes any other; each container then follows its VM: a running
// one's stop is waited for as if this server had started it, one whose
// VM stopped meanwhile or was undone reports that exit, and a VM no
// container names is removed. A bad checkpoint is logged and skipped.
func (s *Server) recover(ctx context.Context) {
	sbs, errs := ckpt.ReadAll[sandboxRecord](s.cfg.sandboxCkptDir(), checkpointVersion)
	for _, err := range errs {
		log.G(ctx).WithError(err).Warn("skip a sandbox checkpoint")
	}
	for _, rec := range sbs {
		sb := newSandbox(s.cfg, rec)
		if rec.Netns != "" && !exists(rec.Netns) {
			if err := sb.Update(func(r *sandboxRecord) error { r.Netns, r.IPs, r.State = "", nil, sandboxNotReady; return nil }); err != nil {
				log.G(ctx).WithError(err).Warnf("sandbox %s", rec.ID)
			}
		}
		s.sandboxes[rec.ID] = sb
		s.names[sandboxName(rec)] = rec.ID
	}
	s.removeStrayImageVolumes(ctx)

	cs, errs := ckpt.ReadAll[containerRecord](s.cfg.containerCkptDir(), containerCheckpointVersion)
	for _, err := range errs {
		log.G(ctx).WithError(err).Warn("skip a container checkpoint")
	}
	for _, rec := range cs {
		c := newContainer(s.cfg, rec)
		s.containers[rec.ID] = c
		if sb := s.sandboxes[rec.SandboxID]; sb != nil {
			s.names[containerName(rec, sb.Get())] = rec.ID
		}
	}

	s.vms.Recover(ctx, s.consoleFor)
	for _, r := range s.vms.List() {
		if _, ok := s.containers[r.ID]; !ok {
			log.G(ctx).Warnf("VM %s: no container names it; removing it", r.ID)
			if err := s.vms.Remove(ctx, r.ID); err != nil {
				log.G(ctx).WithError(err).Errorf("VM %s: remove it", r.ID)
			}
		}
	}
	for _, c := range s.containers {
		if err := s.follow(ctx, c); err != nil {
			log.G(ctx).WithError(err).Errorf("container %s: after the restart", c.id)
		}
	}
}

// consoleFor is where a VM taken over writes its console: its
// container's log, appended to, and any attach.
func (s *Server) consoleFor(r vmd.Record) (io.Writer, error) {
	c := s.containers[r.ID]
	if c == nil {
		return nil, nil
	}
	clog, err := openCRILog(c.Get().LogPath)
	if err != nil {
		return nil, err
	}
	c.log, c.console = clog, newConsoleOut(clog)
	return c.console, nil
}

// follow makes a recovered container agree with its VM.
func (s *Server) follow(ctx context.Context, c *container) error {
	rec := c.Get()
	_, err := s.vms.Get(c.id)
	switch {
	case rec.State == containerExited:
		if err == nil {
			return s.vms.Remove(ctx, c.id)
		}
		return nil
	case errdefs.IsNotFound(err):
		return c.Update(func(r *containerRecord) error {
			r.State, r.FinishedAt, r.ExitCode = containerExited, time.Now().UnixNano(), 137
			r.Reason, r.Message = "RuntimeRestarted", "vm-runtime restarted and found no record of the container's VM"
			return nil
		})
	case err != nil:
		return err
	}
	// The VM runs on, or stopped (an undone one included: Recover leaves
	// no VM created): the wait records its exit as for any other. A
	// container still created had its VM started or undone.
	if rec.State == containerCreated {
		if err := c.Update(func(r *containerRecord) error { r.State = containerRunning; return nil }); err != nil {
			return err
		}
	}
	s.watch(c)
	return nil
}

// removeStrayImageVolumes removes the image volume links of sandboxes no
// checkpoint names (a RemovePodSandbox cut short between its steps).
func (s *Server) removeStrayImageVolumes(ctx context.Context) {
	entries, err := os.ReadDir(s.cfg.imageVolumeDir())
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			log.G(ctx).WithError(err).Warn("image volume links")
		}
		return
	}
	for _, e := range entries {
		if _, ok := s.sandboxes[e.Name()]; ok {
			continue
		}
		if err := s.removeImageVolumes(e.Name()); err != nil {
			log.G(ctx).WithError(err).Warn("stray image volume links")
		}
	}
}
