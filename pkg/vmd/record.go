package vmd

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/containerd/errdefs"

	"github.com/vmpod/vmpod/internal/ckpt"
	"github.com/vmpod/vmpod/pkg/vm"
	"github.com/vmpod/vmpod/pkg/vmspec"
)

// State is where a VM is in its life (the diagram in doc.go).
type State string

const (
	Created State = "created"
	Running State = "running"
	Stopped State = "stopped"
)

// checkpointVersion is bumped when a Record's meaning changes; a reader
// skips (and logs) a checkpoint of another version rather than guess.
const checkpointVersion = 1

// Record is a VM as checkpointed: what a restarted process needs to take
// it over or undo it, and what a front door reports of it.
type Record struct {
	ID    string `json:"id"`
	PodID string `json:"podId"`
	// Namespace and Pod name the Kubernetes pod, for metrics and logs.
	Namespace string      `json:"namespace,omitempty"`
	Pod       string      `json:"pod,omitempty"`
	Spec      vmspec.Spec `json:"spec"`
	// Netns, ResolvConf and Hostname are the pod network the VM took
	// over (vm.Network).
	Netns      string `json:"netns,omitempty"`
	ResolvConf string `json:"resolvConf,omitempty"`
	Hostname   string `json:"hostname,omitempty"`

	State      State `json:"state"`
	CreatedAt  int64 `json:"createdAt"`
	StartedAt  int64 `json:"startedAt,omitempty"`
	FinishedAt int64 `json:"finishedAt,omitempty"`
	// Exit is how a stopped VM ended.
	Exit Exit `json:"exit,omitempty"`
	// Held is what the VM holds on the node, as pkg/vm reports it before
	// each acquisition: what a restarted process takes over or undoes.
	Held vm.Held `json:"held"`
}

// Exit is vm.Exit as checkpointed.
type Exit struct {
	Status  uint32 `json:"status"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

func exitOf(e vm.Exit) Exit { return Exit{Status: e.Status, Reason: e.Reason, Message: e.Message} }

func (r Record) network() vm.Network {
	return vm.Network{Netns: r.Netns, ResolvConf: r.ResolvConf, Hostname: r.Hostname}
}

// instance is one VM of the node, its record checkpointed.
type instance struct {
	*ckpt.Store[Record]
	id string // never changes

	// vm is set from Create (or Recover's adoption) until the VM is
	// deleted. Only Create, Start, Stop, Kill and Remove (each holding
	// the busy mark) and the VM's wait use it directly; everything that
	// runs beside them goes through use.
	vm *vm.VM
	// stopped is closed when the VM reached Stopped: its exit recorded
	// and all it held released.
	stopped chan struct{}
	live    liveVM
	// pressing: a Shutdown's power button is being pressed again.
	pressing atomic.Bool
}

func newInstance(cfg Config, rec Record) *instance {
	return &instance{Store: ckpt.New("VM "+rec.ID, cfg.checkpoint(rec.ID), checkpointVersion, rec),
		id: rec.ID, stopped: make(chan struct{})}
}

// abandon lets go of the running VM without stopping it (Service.Close).
// Its wait never returns then: the Runtime forgot its Machine.
func (in *instance) abandon() {
	l := &in.live
	l.mu.Lock()
	v := l.vm
	l.vm = nil
	l.mu.Unlock()
	if v != nil {
		v.Abandon()
	}
}

// record is the VM's vm.Request.Record.
func (in *instance) record(h vm.Held) error {
	return in.Update(func(r *Record) error { r.Held = h; return nil })
}

// liveVM is the VM while it runs, for the calls that share it with its
// lifecycle: use lends it out, and stop (the VM's wait, once the VM
// stopped) takes it back, cancels what still uses it and waits for them
// before the VM is deleted.
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

// use is the running VM, a context that ends when it stops, and the
// release every use must call; FailedPrecondition when it does not run.
func (in *instance) use() (*vm.VM, context.Context, func(), error) {
	l := &in.live
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.vm == nil {
		return nil, nil, nil, errorf(errdefs.ErrFailedPrecondition, "VM %s is %s, not running", in.id, in.Get().State)
	}
	l.users.Add(1)
	return l.vm, l.ctx, l.users.Done, nil
}
