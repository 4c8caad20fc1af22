package shim

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	eventstypes "github.com/containerd/containerd/api/events"
	taskAPI "github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/types/known/anypb"

	node "github.com/vmpod/vmpod/api/node/v1"
	"github.com/vmpod/vmpod/pkg/nodeclient"
)

// vmTask is the container task that is the VM: a translation of the task
// API onto the node daemon's, which runs the VM.
type vmTask struct {
	id      string
	podID   string // the sandbox's id; the VM's own without a sandbox (ctr run)
	node    *nodeclient.Client
	console *console
	task    *task
}

// createVM asks the node daemon to make the VM of the task's OCI spec, up
// to a defined, not yet started domain, on the pod's network namespace,
// and starts copying its console to the task's stdout.
func createVM(ctx context.Context, nc *nodeclient.Client, p *pod, r *taskAPI.CreateTaskRequest, oci *specs.Spec, t *task) (_ *vmTask, retErr error) {
	spec, err := json.Marshal(oci)
	if err != nil {
		return nil, fmt.Errorf("task %s: its OCI spec: %v: %w", r.ID, err, errdefs.ErrInvalidArgument)
	}
	c, err := openConsole(ctx, r.Stdin, r.Stdout, r.Stderr, r.Terminal)
	if err != nil {
		return nil, err
	}
	defer func() {
		if retErr != nil {
			c.close()
		}
	}()
	req := &node.CreateRequest{Id: r.ID, PodId: p.id, Spec: spec, Bundle: r.Bundle, Netns: p.netns}
	for _, m := range r.Rootfs {
		req.Rootfs = append(req.Rootfs, &node.Mount{Type: m.Type, Source: m.Source, Target: m.Target, Options: m.Options})
	}
	if err := nc.Create(ctx, req); err != nil {
		return nil, err
	}
	v := &vmTask{id: r.ID, podID: p.id, node: nc, console: c, task: t}
	c.follow(func(ctx context.Context, w consoleWriter) error { return nc.Console(ctx, r.ID, w) })
	return v, nil
}

// start boots the VM and connects the console's stdin.
func (v *vmTask) start(ctx context.Context) (uint32, error) {
	pid, err := v.node.Start(ctx, v.id)
	if err != nil {
		return 0, err
	}
	v.console.feed(func(data []byte) error {
		return v.node.ConsoleInput(context.Background(), v.id, data)
	})
	go v.wait()
	return pid, nil
}

// wait turns the VM's end into the task's exit. It outlives the daemon's
// restarts (nodeclient.Client.Wait).
func (v *vmTask) wait() {
	status, at := uint32(255), time.Now()
	exit, err := v.node.Wait(context.Background(), v.id)
	if err != nil {
		log.L.WithError(err).Errorf("wait for the VM of %s: the task ends with status %d", v.id, status)
	} else {
		status = exit.Status
		if exit.ExitedAtUnixNano != 0 {
			at = time.Unix(0, exit.ExitedAtUnixNano)
		}
		if exit.Reason == "OOMKilled" {
			// The CRI marks a container OOMKilled when it saw TaskOOM before the exit.
			v.task.svc.publish(&eventstypes.TaskOOM{ContainerID: v.id})
		}
		log.L.Infof("VM exited: %d %s: %s", exit.Status, exit.Reason, exit.Message)
	}
	v.console.drain(2 * time.Second)
	v.console.close()
	v.task.onExit(status, at)
}

// kill: SIGTERM and SIGINT press the ACPI power button (again and again,
// in the daemon, until the VM stops: a booting guest loses a press, and
// containerd sends SIGTERM once), SIGKILL stops the VM hard. A VM that
// never started ends now with 128+signal.
func (v *vmTask) kill(ctx context.Context, sig uint32, created bool) error {
	if sig == 0 {
		_, err := v.node.Get(ctx, v.id) // is it there?
		return err
	}
	if created {
		if err := v.node.Kill(ctx, v.id, sig); err != nil {
			return err
		}
		v.console.close()
		v.task.onExit(128+sig, time.Now())
		return nil
	}
	switch unix.Signal(sig) {
	case unix.SIGTERM, unix.SIGINT:
		return v.node.Shutdown(ctx, v.id)
	case unix.SIGKILL:
		return v.node.Kill(ctx, v.id, sig)
	default:
		return fmt.Errorf("signal %d: a VM takes SIGTERM or SIGINT (ACPI power button) and SIGKILL (hard stop): %w",
			sig, errdefs.ErrInvalidArgument)
	}
}

func (v *vmTask) pause(ctx context.Context) error  { return v.node.Pause(ctx, v.id) }
func (v *vmTask) resume(ctx context.Context) error { return v.node.Resume(ctx, v.id) }
func (v *vmTask) closeStdin()                      { v.console.closeStdin() }

func (v *vmTask) update(ctx context.Context, resources *anypb.Any) error {
	return v.node.Update(ctx, v.id, resources)
}

func (v *vmTask) checkpoint(ctx context.Context, dir string) error {
	_, err := v.node.Checkpoint(ctx, v.id, dir)
	return err
}

func (v *vmTask) stats(ctx context.Context) (*anypb.Any, error) { return v.node.Stats(ctx, v.id) }

// delete has the daemon remove the VM (stopping it hard if it runs) and
// all it holds; a VM the daemon no longer has is gone already. A VM
// without a sandbox (ctr run) is its own pod, released with it.
func (v *vmTask) delete(ctx context.Context) error {
	v.console.close()
	return removeVM(ctx, v.node, v.id, v.podID == v.id)
}

// removeVM has the daemon remove the VM id, and release its pod too when
// it is the VM's own; what the daemon no longer has is gone already.
func removeVM(ctx context.Context, nc *nodeclient.Client, id string, ownPod bool) error {
	if err := nc.Remove(ctx, id); err != nil && !errdefs.IsNotFound(err) {
		return err
	}
	if ownPod {
		return nc.ReleasePod(ctx, id)
	}
	return nil
}
