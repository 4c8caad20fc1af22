package vm

import (
	"sync"

	"github.com/vmpod/vmpod/pkg/virt"
)

// Runtime is the VMs of one hypervisor connection. It reads the
// connection's lifecycle events, which are for all its domains, and hands
// each to its Machine.
type Runtime struct {
	hv       virt.Hypervisor
	mu       sync.Mutex
	machines map[string]*Machine
	done     chan struct{}
	logs     logCapper // of its QEMUs' stderr logs
	// restoring is held by a Create that restores, from its look at
	// whether the checkpoint's domain is taken until it has defined its
	// own, so that of two pods of one checkpoint created at once the
	// second sees the first's domain and restores beside it.
	restoring sync.Mutex
}

// NewRuntime takes over hv's events until hv is closed.
func NewRuntime(hv virt.Hypervisor) *Runtime {
	rt := &Runtime{hv: hv, machines: map[string]*Machine{}, done: make(chan struct{})}
	go rt.dispatch()
	return rt
}

func (rt *Runtime) dispatch() {
	defer close(rt.done)
	for ev := range rt.hv.Events() {
		if ev.Type != virt.EventStopped && ev.Type != virt.EventShutdown && ev.Type != virt.EventPausedOnIOError {
			continue
		}
		rt.mu.Lock()
		m := rt.machines[ev.Domain]
		rt.mu.Unlock()
		if m == nil {
			continue
		}
		switch ev.Type {
		case virt.EventShutdown:
			m.shuttingDown(ev.Reason)
		case virt.EventPausedOnIOError:
			m.pausedOnIOError()
		default:
			m.stopped(ev.Reason)
		}
	}
}

func (rt *Runtime) add(m *Machine) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.machines[m.name] = m
}

func (rt *Runtime) remove(m *Machine) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.machines[m.name] == m {
		delete(rt.machines, m.name)
	}
}
