package vmd

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"

	"github.com/vmpod/vmpod/pkg/jail"
	"github.com/vmpod/vmpod/pkg/node"
	"github.com/vmpod/vmpod/pkg/node/embedded"
	"github.com/vmpod/vmpod/pkg/virt/libvirt"
	"github.com/vmpod/vmpod/pkg/vm"
	"github.com/vmpod/vmpod/pkg/vmspec"
)

// Service is the VMs of one node.
type Service struct {
	cfg Config

	mu  sync.Mutex
	vms map[string]*instance

	hvMu sync.Mutex
	conn *libvirt.Conn
	env  vm.Env // Runtime and Host (each pod has its Jail)

	metrics *metrics

	trimming atomic.Bool // a malloc trim is due (trimMalloc)
}

// trimWait is how long trimMalloc waits before it trims, so a burst of
// starts and stops is one trim.
const trimWait = time.Second

// trimMalloc hands the free pages of the process's malloc arenas back to
// the kernel (glibc's malloc_trim) soon, off the caller's path. libvirt
// allocates from many threads, one event thread per VM among them, and
// glibc keeps what they free in up to 8 arenas per CPU: a domain's start
// (its XML, QMP replies, the capabilities it checks) allocates a lot and
// frees almost all of it. Trimmed after each start and removal, that
// memory does not stay in the daemon (BenchmarkShimFootprint's daemon
// figures).
func (s *Service) trimMalloc() {
	if !s.trimming.CompareAndSwap(false, true) {
		return // one is due already
	}
	time.AfterFunc(trimWait, func() {
		s.trimming.Store(false)
		libvirt.TrimMalloc()
	})
}

// New opens the node's VM state under cfg.StateRoot. It opens libvirt at
// the first VM (or in Recover, when a checkpoint names a domain).
func New(cfg Config) (*Service, error) {
	cfg = cfg.WithDefaults()
	if err := os.MkdirAll(cfg.checkpointDir(), 0o700); err != nil {
		return nil, errorf(errdefs.ErrInternal, "VM checkpoints: %v", err)
	}
	s := &Service{cfg: cfg, vms: map[string]*instance{}}
	s.metrics = newMetrics(s)
	return s, nil
}

// Close lets go of every VM (vm.VM.Abandon: their console connections and
// DHCP servers close) and closes the node's libvirt; QEMUs keep running,
// and the next process's Recover takes them over. Call nothing else
// after it.
func (s *Service) Close() error {
	for _, in := range s.snapshot() {
		in.abandon()
	}
	s.hvMu.Lock()
	defer s.hvMu.Unlock()
	if s.conn == nil {
		return nil
	}
	err := s.conn.Close()
	s.conn = nil
	return err
}

// hypervisor opens the node's embedded libvirt once (one root per
// process: <state root>/libvirt) and what it runs on. Call it on a thread
// in the process's own network namespace: libvirt's threads start here.
func (s *Service) hypervisor(ctx context.Context) (vm.Env, error) {
	s.hvMu.Lock()
	defer s.hvMu.Unlock()
	if s.conn != nil {
		return s.env, nil
	}
	jailer, err := jail.LinkEmulator(filepath.Dir(vm.JailerLink(s.cfg.StateRoot)))
	if err != nil {
		return vm.Env{}, errorf(errdefs.ErrInternal, "QEMU's jailer: %v", err)
	}
	if target, err := os.Readlink(jailer); err == nil {
		log.G(ctx).Infof("QEMU's jailer: %s (%s next to vm-runtime, else vm-runtime itself)", target, jail.EmulatorName)
	}
	o := node.Options{CapsCache: s.cfg.CapsCache, KVMCache: s.cfg.KVMCache, Pod: true, Jailer: jailer, ProbeArgv: s.cfg.CapsProbe}
	conn, err := embedded.Open(ctx, s.cfg.libvirtRoot(), o)
	if err != nil {
		return vm.Env{}, err
	}
	h, err := node.HostOf(ctx, conn, o)
	if err != nil {
		conn.Close()
		return vm.Env{}, err
	}
	s.conn = conn
	s.env = vm.Env{Runtime: vm.NewRuntime(conn), Host: h}
	return s.env, nil
}

// opener is a VM's vm.Opener: the node's env, open already.
func opener(env vm.Env) vm.Opener {
	return func(context.Context) (vm.Env, error) { return env, nil }
}

// Layout is where the pod's VM keeps its files: <state root>/pods/<pod>.
// The pod's front door may keep files of its own there (the CRI server's
// resolv.conf); ReleasePod removes it all.
func (s *Service) Layout(podID string) vm.Layout { return vm.PodLayout(s.cfg.StateRoot, podID) }

// MountRules are the node's rules for the shares of a VM (Config.Mounts),
// which its front door hands FromOCI.
func (s *Service) MountRules() vmspec.MountRules { return s.cfg.Mounts }

// jail leases the pod's QEMU uid (again: a lease is per pod dir) with the
// node's libvirt root, whose secret dir QEMU is shown.
func (s *Service) jail(podID string) (vm.Jail, error) {
	j, err := vm.LeaseJail(s.cfg.StateRoot, s.cfg.UIDs, s.Layout(podID), s.cfg.DiskCap)
	if err != nil {
		return vm.Jail{}, err
	}
	j.LibvirtRoot = s.cfg.libvirtRoot()
	return j, nil
}

// podReleaseWait bounds ReleasePod's wait for the pod's VMs to go.
var podReleaseWait = 20 * time.Second

// ReleasePod deletes the pod's dir and gives back its QEMU uid, once no
// VM of the pod holds anything; a pod already released is no error. It
// waits for the pod's VMs to go, up to podReleaseWait (or ctx's end),
// then fails with FailedPrecondition naming one: after a pod's shim died,
// containerd cleans up its sandbox and its containers at once, and the
// sandbox's release must not lose the race to the VM's removal.
func (s *Service) ReleasePod(ctx context.Context, podID string) error {
	ctx, cancel := context.WithTimeout(ctx, podReleaseWait)
	defer cancel()
	for {
		r, held := s.podHolder(podID)
		if !held {
			break
		}
		select {
		case <-ctx.Done():
			return errorf(errdefs.ErrFailedPrecondition, "pod %s: its VM %s still holds %+v", podID, r.ID, r.Held)
		case <-time.After(100 * time.Millisecond):
		}
	}
	l := s.Layout(podID)
	if err := os.RemoveAll(l.Dir); err != nil {
		return errorf(errdefs.ErrInternal, "pod dir: %v", err)
	}
	if err := vm.ReleaseJail(s.cfg.StateRoot, l); err != nil {
		return errorf(errdefs.ErrInternal, "QEMU's uid lease: %v", err)
	}
	return nil
}

// podHolder is a VM of the pod that still holds something on the node.
func (s *Service) podHolder(podID string) (Record, bool) {
	for _, in := range s.snapshot() {
		if r := in.Get(); r.PodID == podID && !r.Held.Empty() {
			return r, true
		}
	}
	return Record{}, false
}

// get finds a VM by its id.
func (s *Service) get(id string) (*instance, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if in := s.vms[id]; in != nil {
		return in, nil
	}
	return nil, errorf(errdefs.ErrNotFound, "VM %q", id)
}

func (s *Service) snapshot() []*instance {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*instance, 0, len(s.vms))
	for _, in := range s.vms {
		out = append(out, in)
	}
	return out
}

// Get is the VM's record; NotFound if the node has none of that id.
func (s *Service) Get(id string) (Record, error) {
	in, err := s.get(id)
	if err != nil {
		return Record{}, err
	}
	return in.Get(), nil
}

// List is the records of every VM of the node, by id.
func (s *Service) List() []Record {
	var out []Record
	for _, in := range s.snapshot() {
		out = append(out, in.Get())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}
