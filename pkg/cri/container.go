package cri

import (
	"context"
	"strconv"
	"strings"
	"sync"

	"github.com/containerd/errdefs"

	"github.com/vmpod/vmpod/pkg/vm"
	"github.com/vmpod/vmpod/pkg/vmspec"
)

// containerState is a container's CRI state; the container is the VM:
//
//	CreateContainer ──► created ──StartContainer──► running ──(VM stops)──► exited
//	                       │                                                  ▲
//	                       └─────────────StopContainer (never started)────────┘
//
// RemoveContainer removes a container in any state (stopping a running
// one hard first). While a Start, Stop or Remove is under way the
// container is busy, and a second caller is refused with
// FailedPrecondition. An exited container holds nothing on the node: the
// VM was deleted as it stopped; its record and log file stay.
type containerState string

const (
	containerCreated containerState = "created"
	containerRunning containerState = "running"
	containerExited  containerState = "exited"
)

// containerRecord is what a container is, as checkpointed.
type containerRecord struct {
	ID          string            `json:"id"`
	SandboxID   string            `json:"sandboxId"`
	Name        string            `json:"name"`
	Attempt     uint32            `json:"attempt"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	// Image is the image as the request named it, ImageID the stored one.
	Image   string `json:"image"`
	ImageID string `json:"imageId"`
	LogPath string `json:"logPath,omitempty"`

	State      containerState `json:"state"`
	CreatedAt  int64          `json:"createdAt"`
	StartedAt  int64          `json:"startedAt,omitempty"`
	FinishedAt int64          `json:"finishedAt,omitempty"`
	ExitCode   int32          `json:"exitCode,omitempty"`
	Reason     string         `json:"reason,omitempty"`
	Message    string         `json:"message,omitempty"`

	// Held is what the VM holds on the node, as pkg/vm reports it before
	// each acquisition; what a restarted server takes over (vm.Adopt) or
	// undoes.
	Held vm.Held `json:"held"`
	// Spec is the VM the container was created as, for a restarted server
	// to take it over; nil in a checkpoint of an earlier version of the
	// server, whose VM is undone.
	Spec *vmspec.Spec `json:"spec,omitempty"`
}

// container is one VM container, its record checkpointed.
type container struct {
	*stored[containerRecord]
	id, sandboxID string // never change

	// Set from Create until the VM is deleted; nil after a restart. Only
	// Create, Start, Stop and Remove (each holding the busy mark) and the
	// VM's wait use vm directly; everything that runs beside them (exec,
	// attach, stats, update) goes through use.
	vm  *vm.VM
	log *criLog
	// console is the VM's console output, to the log and any attach.
	console *consoleOut
	// exited is closed when a started VM stopped and was deleted.
	exited chan struct{}

	live liveVM
	cpu  cpuSampler
}

// liveVM is the container's VM while it runs, for the calls that share
// it with its lifecycle: use lends it out, and stop (the VM's wait, once
// the VM stopped) takes it back, cancels what still uses it and waits for
// them before the VM is deleted.
type liveVM struct {
	mu     sync.Mutex
	vm     *vm.VM
	ctx    context.Context // ends when the VM stops
	cancel context.CancelFunc
	users  sync.WaitGroup
}

// start lends v out from now on.
func (l *liveVM) start(v *vm.VM) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.vm = v
	l.ctx, l.cancel = context.WithCancel(context.Background())
}

// use is the running VM, a context that ends when it stops, and the
// release every use must call; FailedPrecondition when it does not run.
func (c *container) use() (*vm.VM, context.Context, func(), error) {
	l := &c.live
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.vm == nil {
		return nil, nil, nil, errorf(errdefs.ErrFailedPrecondition, "container %s is %s, not running", c.id, c.get().State)
	}
	l.users.Add(1)
	return l.vm, l.ctx, l.users.Done, nil
}

// running is nil when the container's VM runs.
func (c *container) running() error {
	_, _, release, err := c.use()
	if err == nil {
		release()
	}
	return err
}

// stop lends the VM out no more, ends what uses it and waits for them.
func (l *liveVM) stop() {
	l.mu.Lock()
	cancel := l.cancel
	l.vm, l.cancel = nil, nil
	l.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	l.users.Wait()
}

func newContainer(c Config, rec containerRecord) *container {
	return &container{stored: newStored("container "+rec.ID, c.containerPath(rec.ID), rec), id: rec.ID, sandboxID: rec.SandboxID}
}

// record is the VM's vm.Request.Record.
func (c *container) record(h vm.Held) error {
	return c.update(func(r *containerRecord) error { r.Held = h; return nil })
}

// container finds a container by id or unique id prefix.
func (s *Server) container(id string) (*container, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.containers[id]; c != nil {
		return c, nil
	}
	var found *container
	for k, c := range s.containers {
		if id != "" && strings.HasPrefix(k, id) {
			if found != nil {
				return nil, errorf(errdefs.ErrInvalidArgument, "container id prefix %q is ambiguous", id)
			}
			found = c
		}
	}
	if found == nil {
		return nil, notFound("container", id)
	}
	return found, nil
}

// containersOf are the sandbox's containers.
func (s *Server) containersOf(sandboxID string) []*container {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*container
	for _, c := range s.containers {
		if c.sandboxID == sandboxID {
			out = append(out, c)
		}
	}
	return out
}

// containerName is the name the kubelet reserves per container.
func containerName(r containerRecord, sb sandboxRecord) string {
	return strings.Join([]string{r.Name, sb.Name, sb.Namespace, sb.UID, strconv.FormatUint(uint64(r.Attempt), 10)}, "_")
}
