package cri

import (
	"context"

	"github.com/containerd/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// RemoveContainer stops the container hard if it runs and forgets it; its
// log file stays for the kubelet. Removing an absent container is no
// error.
func (s *Server) RemoveContainer(ctx context.Context, r *runtimeapi.RemoveContainerRequest) (*runtimeapi.RemoveContainerResponse, error) {
	c, err := s.container(r.GetContainerId())
	if errdefs.IsNotFound(err) {
		return &runtimeapi.RemoveContainerResponse{}, nil
	}
	if err != nil {
		return nil, err
	}
	if err := s.removeContainer(ctx, c); err != nil {
		return nil, err
	}
	return &runtimeapi.RemoveContainerResponse{}, nil
}

func (s *Server) removeContainer(ctx context.Context, c *container) error {
	if err := s.stopContainer(ctx, c, 0); err != nil {
		return err
	}
	if err := c.Begin("remove", nil); err != nil {
		return err
	}
	// Not ended: a removed container stays busy for whoever still holds it.
	rec := c.Get()
	if err := s.vms.Remove(ctx, c.id); err != nil && !errdefs.IsNotFound(err) {
		c.End()
		return err
	}
	if err := c.Remove(); err != nil {
		c.End()
		return err
	}
	s.mu.Lock()
	delete(s.containers, c.id)
	s.mu.Unlock()
	if sb, err := s.sandbox(c.sandboxID); err == nil {
		s.release(containerName(rec, sb.Get()), rec.ID)
	}
	return nil
}
