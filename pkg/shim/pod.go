package shim

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"

	"github.com/vmpod/vmpod/pkg/node"
	"github.com/vmpod/vmpod/pkg/podcgroup"
	"github.com/vmpod/vmpod/pkg/portfwd"
	"github.com/vmpod/vmpod/pkg/virt/remote"
	"github.com/vmpod/vmpod/pkg/vm"
)

// pod is what the sandbox task holds: the pod's state dir and the embedded
// libvirt root in it, which helpers open on demand (pkg/virt/remote): the
// shim links no libvirt. The first is started on first need (at the
// sandbox's creation, in the background, so the VM task's Create finds it
// ready).
type pod struct {
	id     string
	dir    string
	cfg    Config
	netns  string             // the pod network namespace this shim runs in; "" if none
	cgroup *podcgroup.Path    // the sandbox's cgroup, which the shim entered; nil if none
	fwd    *portfwd.Forwarder // port-forward's catcher (portforward.go); nil if none

	once  sync.Once
	hv    *remote.Client
	vmEnv vm.Env
	err   error
}

func newPod(cfg Config, sandboxID string, cgroup *podcgroup.Path) (*pod, error) {
	dir := cfg.podDir(sandboxID)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("pod state dir: %v: %w", err, errdefs.ErrInternal)
	}
	return &pod{id: sandboxID, dir: dir, cfg: cfg, netns: os.Getenv(netnsEnv), cgroup: cgroup}, nil
}

// layout is where the pod's VM keeps its files.
func (p *pod) layout() vm.Layout { return vm.Layout{Dir: p.dir} }

// jail leases the pod's QEMU uid (again: a lease is per pod dir, and
// remove gives it back).
func (p *pod) jail() (vm.Jail, error) {
	return vm.LeaseJail(p.cfg.StateRoot, p.cfg.UIDs, p.layout(), p.cfg.DiskCap)
}

// env is the pod's vm.Opener: the embedded libvirt driver on the pod's
// state dir, through the helper, once. libvirt makes no cgroups: QEMU
// stays in the helper's cgroup, the shim's (the pod's), until the VM moves
// it into its own.
func (p *pod) env(ctx context.Context) (vm.Env, error) {
	p.once.Do(func() {
		j, err := p.jail()
		if err != nil {
			p.err = err
			return
		}
		o := p.cfg.nodeOptions()
		o.Jailer = j.Jailer // probed with the node's cache, not at Define
		if p.hv, p.err = p.cfg.openHypervisor(ctx, p.layout().Libvirt(), o); p.err != nil {
			return
		}
		p.vmEnv.Runtime = vm.NewRuntime(p.hv)
		// `start` probed KVM already (Manager.Start), so this reads the cache.
		p.vmEnv.Host, p.err = node.HostOf(ctx, p.hv, o)
	})
	return p.vmEnv, p.err
}

// close lets go of libvirt; running QEMUs keep running. An open still under
// way (createSandbox starts one) finishes first; one not started yet
// never will.
func (p *pod) close() {
	p.once.Do(func() { p.err = fmt.Errorf("pod %s is being removed: %w", p.id, errdefs.ErrFailedPrecondition) })
	if p.fwd != nil {
		if err := p.fwd.Close(); err != nil {
			log.L.WithError(err).Warn("stop port-forward")
		}
	}
	if p.hv != nil {
		if err := p.hv.Close(); err != nil {
			log.L.WithError(err).Warn("close libvirt")
		}
	}
}

// leaveCgroup takes the shim out of its sandbox's cgroup and removes it
// (cgroupfs), so no empty cgroup outlives the pod's shim; a systemd scope
// goes with the shim by itself.
func (p *pod) leaveCgroup() {
	if p.cgroup == nil {
		return
	}
	if err := podcgroup.Leave(*p.cgroup, os.Getpid()); err != nil {
		log.L.WithError(err).Warn("leave the sandbox cgroup")
	}
}

// remove deletes the pod's state dir, which holds the libvirt root: call
// it only when no VM of the pod runs.
func (p *pod) remove() error {
	p.close()
	return errors.Join(os.RemoveAll(filepath.Clean(p.dir)), vm.ReleaseJail(p.cfg.StateRoot, p.layout()))
}
