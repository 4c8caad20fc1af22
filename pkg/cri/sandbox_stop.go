package cri

import (
	"context"
	"errors"

	"github.com/containerd/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// StopPodSandbox stops the pod's VM at once (the kubelet stopped its
// container with the grace period before), takes it off the pod network
// and removes its namespace. Stopping a stopped or an absent sandbox is
// no error (the CRI asks it to be idempotent; the kubelet stops a pod
// again after it was removed, as critest checks).
func (s *Server) StopPodSandbox(ctx context.Context, r *runtimeapi.StopPodSandboxRequest) (*runtimeapi.StopPodSandboxResponse, error) {
	sb, err := s.sandbox(r.GetPodSandboxId())
	if errdefs.IsNotFound(err) {
		return &runtimeapi.StopPodSandboxResponse{}, nil
	}
	if err != nil {
		return nil, err
	}
	if err := sb.Begin("stop", nil); err != nil {
		return nil, err
	}
	defer sb.End()
	id := sb.Get().ID
	var errs []error
	for _, c := range s.containersOf(id) {
		errs = append(errs, s.stopContainer(ctx, c, 0))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if err := s.teardownSandbox(ctx, sb); err != nil {
		return nil, err
	}
	return &runtimeapi.StopPodSandboxResponse{}, nil
}

// teardownSandbox takes the pod off the network and removes its
// namespace, then records it not ready, for StopPodSandbox and the undo of
// a failed RunPodSandbox. Safe to repeat.
func (s *Server) teardownSandbox(ctx context.Context, sb *sandbox) error {
	rec := sb.Get()
	if rec.Netns == "" {
		return nil
	}
	md := &runtimeapi.PodSandboxMetadata{Name: rec.Name, Namespace: rec.Namespace, Uid: rec.UID, Attempt: rec.Attempt}
	if err := s.net.tearDown(ctx, rec.ID, rec.Netns, md, rec.PortMappings); err != nil {
		return err
	}
	if err := removeNetns(rec.Netns); err != nil {
		return err
	}
	return sb.Update(func(r *sandboxRecord) error {
		r.Netns, r.IPs, r.State = "", nil, sandboxNotReady
		return nil
	})
}
