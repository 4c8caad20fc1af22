package shim

import (
	"os"

	"github.com/containerd/log"

	"github.com/vmpod/vmpod/pkg/podcgroup"
	"github.com/vmpod/vmpod/pkg/portfwd"
)

// pod is what the sandbox task holds: the pod's network namespace (the
// shim runs in it), the sandbox's cgroup (the shim entered it) and
// port-forward's catcher. Its VM is the node daemon's.
type pod struct {
	id     string
	netns  string             // the pod network namespace this shim runs in; "" if none
	cgroup *podcgroup.Path    // the sandbox's cgroup, which the shim entered; nil if none
	fwd    *portfwd.Forwarder // port-forward's catcher (portforward.go); nil if none
}

func newPod(sandboxID string, cgroup *podcgroup.Path) *pod {
	return &pod{id: sandboxID, netns: os.Getenv(netnsEnv), cgroup: cgroup}
}

// close stops port-forward.
func (p *pod) close() {
	if p.fwd != nil {
		if err := p.fwd.Close(); err != nil {
			log.L.WithError(err).Warn("stop port-forward")
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
