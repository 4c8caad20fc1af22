package cri

import (
	"context"
	"time"

	"github.com/containerd/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// StopContainer presses the VM's ACPI power button and stops it hard
// when the guest has not powered off within the timeout. Stopping a
// stopped or an absent container is no error (the CRI asks it to be
// idempotent, as critest checks).
func (s *Server) StopContainer(ctx context.Context, r *runtimeapi.StopContainerRequest) (*runtimeapi.StopContainerResponse, error) {
	c, err := s.container(r.GetContainerId())
	if errdefs.IsNotFound(err) {
		return &runtimeapi.StopContainerResponse{}, nil
	}
	if err != nil {
		return nil, err
	}
	if err := s.stopContainer(ctx, c, time.Duration(r.GetTimeout())*time.Second); err != nil {
		return nil, err
	}
	return &runtimeapi.StopContainerResponse{}, nil
}

// stopContainer stops c with grace and waits until its VM is deleted.
func (s *Server) stopContainer(ctx context.Context, c *container, grace time.Duration) error {
	if err := c.begin("stop", nil); err != nil {
		return err
	}
	defer c.end()
	rec := c.get()
	switch {
	case rec.State == containerExited:
		return nil
	case rec.State == containerCreated:
		// Never started: the defined VM goes, and the container is over.
		if c.vm != nil {
			if err := c.vm.Delete(ctx); err != nil {
				return err
			}
			c.log.Close()
		}
		return c.update(func(r *containerRecord) error {
			r.State, r.FinishedAt, r.Reason = containerExited, time.Now().UnixNano(), "NotStarted"
			return nil
		})
	}
	if c.vm == nil || c.exited == nil {
		return errorf(errdefs.ErrInternal, "container %s runs, but this server holds no VM for it", rec.ID)
	}
	if _, err := c.vm.Stop(ctx, grace); err != nil {
		return err
	}
	select {
	case <-c.exited:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
