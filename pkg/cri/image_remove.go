package cri

import (
	"context"

	"github.com/containerd/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// RemoveImage deletes a stored image no container uses: a VM's overlay
// has the image's disk as its backing file. Removing an absent image is
// no error.
func (s *Server) RemoveImage(ctx context.Context, r *runtimeapi.RemoveImageRequest) (*runtimeapi.RemoveImageResponse, error) {
	img, ok := s.images.Get(r.GetImage().GetImage())
	if !ok {
		return &runtimeapi.RemoveImageResponse{}, nil
	}
	s.mu.Lock()
	var user string
	for _, c := range s.containers {
		if rec := c.get(); rec.ImageID == img.ID {
			user = rec.ID
		}
	}
	s.mu.Unlock()
	if user != "" {
		return nil, errorf(errdefs.ErrFailedPrecondition, "image %s is used by container %s", img.ID, user)
	}
	if err := s.images.Remove(img.ID); err != nil {
		return nil, err
	}
	return &runtimeapi.RemoveImageResponse{}, nil
}
