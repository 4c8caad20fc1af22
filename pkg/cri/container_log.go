package cri

import (
	"context"

	"github.com/containerd/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ReopenContainerLog starts a new log file at the container's log path,
// after the kubelet rotated the old one.
func (s *Server) ReopenContainerLog(ctx context.Context, r *runtimeapi.ReopenContainerLogRequest) (*runtimeapi.ReopenContainerLogResponse, error) {
	c, err := s.container(r.GetContainerId())
	if err != nil {
		return nil, err
	}
	if rec := c.Get(); rec.State != containerRunning || c.log == nil {
		return nil, errorf(errdefs.ErrFailedPrecondition, "container %s is not running", rec.ID)
	}
	if err := c.log.Reopen(); err != nil {
		return nil, errorf(errdefs.ErrInternal, "reopen the log: %v", err)
	}
	return &runtimeapi.ReopenContainerLogResponse{}, nil
}
