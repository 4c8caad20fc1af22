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

	"github.com/vmpod/vmpod/pkg/host"
	"github.com/vmpod/vmpod/pkg/jail"
	"github.com/vmpod/vmpod/pkg/node"
	"github.com/vmpod/vmpod/pkg/podcgroup"
	"github.com/vmpod/vmpod/pkg/virt/libvirt"
	"github.com/vmpod/vmpod/pkg/vm"
)

// pod is what the sandbox task holds: the pod's state dir and the embedded
// libvirt opened in it. libvirt is opened on first need (the VM task's
// Create), since opening probes QEMU.
type pod struct {
	id     string
	dir    string
	cfg    Config
	netns  string          // the pod network namespace this shim runs in; "" if none
	cgroup *podcgroup.Path // the sandbox's cgroup, which the shim entered; nil if none

	once sync.Once
	conn *libvirt.Conn
	rt   *vm.Runtime
	host host.Host
	err  error

	jailOnce sync.Once
	jail     vm.Jail // QEMU's uid and jailer, made on first need
	jailErr  error
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

// hypervisor opens the embedded libvirt driver in the pod's state dir,
// once. libvirt makes no cgroups: QEMU stays in the shim's cgroup (the
// pod's) until the VM task moves it into its own.
func (p *pod) hypervisor(ctx context.Context) (*vm.Runtime, host.Host, error) {
	p.once.Do(func() {
		o := p.cfg.nodeOptions()
		p.conn, p.err = node.Open(ctx, p.layout().Libvirt(), o)
		if p.err != nil {
			return
		}
		p.rt = vm.NewRuntime(p.conn)
		// `start` probed already (Manager.Start), so this reads the cache.
		p.host, p.err = node.HostOf(ctx, p.conn, o)
	})
	return p.rt, p.host, p.err
}

// qemuJail leases the pod's QEMU uid and links the jailer, once.
func (p *pod) qemuJail() (vm.Jail, error) {
	p.jailOnce.Do(func() {
		jailer, err := jail.LinkEmulator(filepath.Dir(vm.JailerLink(p.cfg.StateRoot)))
		if err != nil {
			p.jailErr = fmt.Errorf("QEMU's jailer: %v: %w", err, errdefs.ErrInternal)
			return
		}
		uid, err := jail.Allocate(p.cfg.uidLeases(), p.cfg.UIDs, p.dir)
		if err != nil {
			p.jailErr = fmt.Errorf("a uid for QEMU: %v: %w", err, errdefs.ErrResourceExhausted)
			return
		}
		p.jail = vm.Jail{Jailer: jailer, UID: uid, GID: uid, LibvirtRoot: p.layout().Libvirt(), DiskCap: p.cfg.DiskCap}
	})
	return p.jail, p.jailErr
}

// close closes libvirt; running QEMUs keep running.
func (p *pod) close() {
	if p.conn != nil {
		if err := p.conn.Close(); err != nil {
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
	return errors.Join(os.RemoveAll(filepath.Clean(p.dir)), jail.Release(p.cfg.uidLeases(), p.dir))
}
