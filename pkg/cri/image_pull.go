package cri

import (
	"context"

	"github.com/containerd/log"
	"github.com/google/go-containerregistry/pkg/authn"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/vmpod/vmpod/pkg/vm"
)

// PullImage pulls the image with the request's registry credentials and
// unpacks it once for every VM of it.
func (s *Server) PullImage(ctx context.Context, r *runtimeapi.PullImageRequest) (*runtimeapi.PullImageResponse, error) {
	var auth *authn.AuthConfig
	if a := r.GetAuth(); a != nil {
		auth = &authn.AuthConfig{Username: a.GetUsername(), Password: a.GetPassword(), Auth: a.GetAuth(),
			IdentityToken: a.GetIdentityToken(), RegistryToken: a.GetRegistryToken()}
	}
	ref := r.GetImage().GetImage()
	id, err := s.images.Pull(ctx, ref, auth)
	if err != nil {
		return nil, vm.StorageError(err, s.cfg.StateRoot)
	}
	log.G(ctx).Infof("pulled %s: %s", ref, id)
	return &runtimeapi.PullImageResponse{ImageRef: id}, nil
}
