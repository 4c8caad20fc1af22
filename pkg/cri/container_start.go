package cri

import (
	"context"
	"fmt"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/vmpod/vmpod/pkg/vmd"
)

// StartContainer boots the VM (vmd.Service.Start) and waits for its end
// in the background.
func (s *Server) StartContainer(ctx context.Context, r *runtimeapi.StartContainerRequest) (*runtimeapi.StartContainerResponse, error) {
	c, err := s.container(r.GetContainerId())
	if err != nil {
		return nil, err
	}
	if err := c.Begin("start", func(rec containerRecord) error {
		if rec.State != containerCreated {
			return errorf(errdefs.ErrFailedPrecondition, "container %s is %s, not created", rec.ID, rec.State)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	defer c.End()
	if _, err := s.vms.Start(ctx, c.id); err != nil {
		s.startFailed(ctx, c, err)
		return nil, err
	}
	if err := c.Update(func(r *containerRecord) error {
		r.State, r.StartedAt = containerRunning, time.Now().UnixNano()
		return nil
	}); err != nil {
		log.G(ctx).WithError(err).Warnf("container %s runs, but its checkpoint says not", c.id)
	}
	s.watch(c)
	return &runtimeapi.StartContainerResponse{}, nil
}

// startFailed records a start that failed as the container's exit, as
// containerd does (exit code 128, reason StartError, the error as the
// message): the kubelet then makes a new container for the pod, where a
// container left created would stand in the way of it (a VM pod has one
// container at a time). The VM's node resources go now, as a stopped
// VM's do, rather than at RemoveContainer.
func (s *Server) startFailed(ctx context.Context, c *container, startErr error) {
	ctx = context.WithoutCancel(ctx)
	if err := s.vms.Remove(ctx, c.id); err != nil && !errdefs.IsNotFound(err) {
		log.G(ctx).WithError(err).Errorf("container %s: forget the VM that did not start", c.id)
	}
	if c.log != nil {
		c.log.Close()
	}
	if err := c.Update(func(r *containerRecord) error {
		r.State, r.FinishedAt = containerExited, time.Now().UnixNano()
		r.ExitCode, r.Reason, r.Message = startErrorExitCode, startErrorReason, startErr.Error()
		return nil
	}); err != nil {
		log.G(ctx).WithError(err).Errorf("container %s: record its failed start", c.id)
	}
}

// The exit a failed start records, as containerd's CRI records it.
const (
	startErrorExitCode = 128
	startErrorReason   = "StartError"
)

// watch waits, in the background, for the running container's VM to stop.
func (s *Server) watch(c *container) {
	c.exited = make(chan struct{})
	go s.wait(c)
}

// wait turns the VM's end into the container's exit: once the VM service
// has drained the console and deleted the VM, the log closes, the exit
// is recorded, and the VM's record goes (the container's keeps its exit).
func (s *Server) wait(c *container) {
	ctx := context.Background()
	exit, err := s.vms.Wait(ctx, c.id)
	if err != nil {
		exit = vmd.Exit{Status: 137, Reason: "Unknown", Message: fmt.Sprintf("vmpod lost the VM: %v", err)}
		log.G(ctx).WithError(err).Errorf("container %s: wait for the VM", c.id)
	}
	if c.console != nil {
		c.console.close()
	}
	if c.log != nil {
		c.log.Close()
	}
	if err := c.Update(func(r *containerRecord) error {
		r.State, r.FinishedAt = containerExited, time.Now().UnixNano()
		r.ExitCode, r.Reason, r.Message = int32(exit.Status), exit.Reason, exit.Message
		return nil
	}); err != nil {
		log.G(ctx).WithError(err).Errorf("container %s: record its exit", c.id)
	}
	if err := s.vms.Remove(ctx, c.id); err != nil && !errdefs.IsNotFound(err) {
		log.G(ctx).WithError(err).Errorf("container %s: forget its stopped VM", c.id)
	}
	log.G(ctx).Infof("container %s exited: %d %s: %s", c.id, exit.Status, exit.Reason, exit.Message)
	close(c.exited)
}
