package cri

import (
	"context"
	"errors"

	"github.com/containerd/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// RemovePodSandbox stops the pod if needed, removes its containers, its
// image volume links, its dir (the VM's files), its QEMU uid lease and
// its checkpoint. Removing an
// absent sandbox is no error.
func (s *Server) RemovePodSandbox(ctx context.Context, r *runtimeapi.RemovePodSandboxRequest) (*runtimeapi.RemovePodSandboxResponse, error) {
	sb, err := s.sandbox(r.GetPodSandboxId())
	if errdefs.IsNotFound(err) {
		return &runtimeapi.RemovePodSandboxResponse{}, nil
	}
	if err != nil {
		return nil, err
	}
	if _, err := s.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.Get().ID}); err != nil {
		return nil, err
	}
	if err := sb.Begin("remove", nil); err != nil {
		return nil, err
	}
	defer sb.End()
	rec := sb.Get()
	var errs []error
	for _, c := range s.containersOf(rec.ID) {
		errs = append(errs, s.removeContainer(ctx, c))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if err := s.removeDefaultPodCgroup(rec); err != nil {
		return nil, err
	}
	if err := s.removeImageVolumes(rec.ID); err != nil {
		return nil, err
	}
	if err := s.vms.ReleasePod(ctx, rec.ID); err != nil {
		return nil, err
	}
	if err := sb.Remove(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	delete(s.sandboxes, rec.ID)
	s.mu.Unlock()
	s.release(sandboxName(rec), rec.ID)
	return &runtimeapi.RemovePodSandboxResponse{}, nil
}
