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
	if err := c.Begin("stop", nil); err != nil {
		return err
	}
	defer c.End()
	switch c.Get().State {
	case containerExited:
		return nil
	case containerCreated:
		// Never started: the defined VM goes, and the container is over.
		if err := s.vms.Remove(ctx, c.id); err != nil && !errdefs.IsNotFound(err) {
			return err
		}
		if c.log != nil {
			c.log.Close()
		}
		return c.Update(func(r *containerRecord) error {
			r.State, r.FinishedAt, r.Reason = containerExited, time.Now().UnixNano(), "NotStarted"
			return nil
		})
	}
	if c.exited == nil {
		return errorf(errdefs.ErrInternal, "container %s runs, but this server waits for no VM of it", c.id)
	}
	if err := s.vms.Stop(ctx, c.id, grace); err != nil && !errdefs.IsNotFound(err) {
		return err
	}
	select {
	case <-c.exited:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
