package cri

import (
	"context"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// consoleDrain bounds the wait for the guest's last console lines after
// its VM stopped.
const consoleDrain = 2 * time.Second

// StartContainer boots the VM, in the pod's network namespace (libvirt
// opens the tap and forks QEMU from the calling thread).
func (s *Server) StartContainer(ctx context.Context, r *runtimeapi.StartContainerRequest) (*runtimeapi.StartContainerResponse, error) {
	c, err := s.container(r.GetContainerId())
	if err != nil {
		return nil, err
	}
	if err := c.begin("start", func(rec containerRecord) error {
		if rec.State != containerCreated || c.vm == nil {
			return errorf(errdefs.ErrFailedPrecondition, "container %s is %s, not created", rec.ID, rec.State)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	defer c.end()
	sb, err := s.sandbox(c.sandboxID)
	if err != nil {
		return nil, err
	}
	if err := inNetns(sb.get().Netns, func() error {
		_, err := c.vm.Start(ctx)
		return err
	}); err != nil {
		return nil, err
	}
	c.exited = make(chan struct{})
	c.live.start(c.vm)
	if err := c.update(func(r *containerRecord) error {
		r.State, r.StartedAt = containerRunning, time.Now().UnixNano()
		return nil
	}); err != nil {
		log.G(ctx).WithError(err).Warnf("container %s runs, but its checkpoint says not", c.id)
	}
	log.G(ctx).WithField("phases", c.vm.Phases().String()).Infof("container %s: VM started", c.id)
	go s.wait(c)
	return &runtimeapi.StartContainerResponse{}, nil
}

// wait turns the VM's end into the container's exit: the last console
// lines into the log, the VM deleted with all it holds, the exit
// recorded.
func (s *Server) wait(c *container) {
	ctx := context.Background()
	exit, err := c.vm.Wait(ctx)
	if err != nil {
		log.G(ctx).WithError(err).Errorf("container %s: wait for the VM", c.id)
	}
	select {
	case <-c.vm.ConsoleDone():
	case <-time.After(consoleDrain):
	}
	// Exec, attach and stats give the VM back before it goes.
	c.live.stop()
	c.console.close()
	if err := c.vm.Delete(ctx); err != nil {
		log.G(ctx).WithError(err).Errorf("container %s: delete the stopped VM (its checkpoint keeps what is left)", c.id)
	}
	c.log.Close()
	if err := c.update(func(r *containerRecord) error {
		r.State, r.FinishedAt = containerExited, time.Now().UnixNano()
		r.ExitCode, r.Reason, r.Message = int32(exit.Status), exit.Reason, exit.Message
		return nil
	}); err != nil {
		log.G(ctx).WithError(err).Errorf("container %s: record its exit", c.id)
	}
	log.G(ctx).Infof("container %s exited: %d %s: %s", c.id, exit.Status, exit.Reason, exit.Message)
	close(c.exited)
}
