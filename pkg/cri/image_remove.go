package cri

import (
	"context"

	"github.com/containerd/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// RemoveImage deletes a stored image no container uses, or is being made
// from: a VM's overlay has the image's disk as its backing file, and an
// image volume's share serves the image's files. Removing an absent
// image is no error.
func (s *Server) RemoveImage(ctx context.Context, r *runtimeapi.RemoveImageRequest) (*runtimeapi.RemoveImageResponse, error) {
	s.imageMu.Lock()
	defer s.imageMu.Unlock()
	img, ok := s.images.Get(r.GetImage().GetImage())
	if !ok {
		return &runtimeapi.RemoveImageResponse{}, nil
	}
	if n := s.imageHolds[img.ID]; n > 0 {
		return nil, errorf(errdefs.ErrFailedPrecondition, "image %s: %d container(s) are being made from it", img.ID, n)
	}
	s.mu.Lock()
	var user, volume string
	for _, c := range s.containers {
		rec := c.Get()
		if rec.ImageID == img.ID {
			user = rec.ID
		} else if p := imageVolumeUser(rec, img.ID); p != "" {
			user, volume = rec.ID, p
		}
	}
	s.mu.Unlock()
	switch {
	case volume != "":
		return nil, errorf(errdefs.ErrFailedPrecondition, "image %s is used by container %s as a volume at %s", img.ID, user, volume)
	case user != "":
		return nil, errorf(errdefs.ErrFailedPrecondition, "image %s is used by container %s", img.ID, user)
	}
	if err := s.images.Remove(ctx, img.ID); err != nil {
		return nil, err
	}
	return &runtimeapi.RemoveImageResponse{}, nil
}

// useImage resolves ref to a stored image for a container being made, and
// holds it until release: RemoveImage refuses an image held, as it
// refuses one a container uses. CreateContainer releases it once the
// container is in s.containers, or its making failed.
func (s *Server) useImage(ref string) (_ image, release func(), _ error) {
	s.imageMu.Lock()
	defer s.imageMu.Unlock()
	img, ok := s.images.Get(ref)
	if !ok {
		return image{}, nil, errorf(errdefs.ErrNotFound, "image %q is not pulled", ref)
	}
	s.imageHolds[img.ID]++
	return img, func() {
		s.imageMu.Lock()
		defer s.imageMu.Unlock()
		if s.imageHolds[img.ID]--; s.imageHolds[img.ID] <= 0 {
			delete(s.imageHolds, img.ID)
		}
	}, nil
}
