package shim

import (
	"fmt"
	"net/netip"
	"os"
	"strconv"

	"github.com/containerd/log"
	"golang.org/x/sys/unix"

	"github.com/vmpod/vmpod/pkg/ocikeys"
	"github.com/vmpod/vmpod/pkg/portfwd"
)

// containerd serves port-forward (kubectl port-forward, crictl
// port-forward) by dialling localhost:<port> inside the sandbox's network
// namespace, where a VM pod's guest cannot be reached (pkg/portfwd says
// why). So the sandbox catches those connections and forwards each to the
// pod IP from the node's network namespace, which the start command hands
// the long-lived shim (nodeNetnsEnv) before it joins the pod's.

// nodeNetns is the long-lived shim's handle on the node's network
// namespace, or why it has none.
type nodeNetns struct {
	f   *os.File
	err error
}

// inheritNodeNetns takes the descriptor the start command passed. It runs
// before anything else in the long-lived shim: the descriptor is made
// close-on-exec at once, so neither the libvirt helper nor QEMU ever holds
// the node's namespace, and the variable goes, so no child misreads it.
func inheritNodeNetns() nodeNetns {
	v, ok := os.LookupEnv(nodeNetnsEnv)
	if !ok {
		return nodeNetns{err: fmt.Errorf("the start command passed no node network namespace ($%s)", nodeNetnsEnv)}
	}
	os.Unsetenv(nodeNetnsEnv)
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		return nodeNetns{err: fmt.Errorf("$%s %q is not a descriptor", nodeNetnsEnv, v)}
	}
	unix.CloseOnExec(fd)
	if t, err := unix.IoctlRetInt(fd, unix.NS_GET_NSTYPE); err != nil || t != unix.CLONE_NEWNET {
		unix.Close(fd)
		return nodeNetns{err: fmt.Errorf("descriptor %d ($%s) is not a network namespace (%v)", fd, nodeNetnsEnv, err)}
	}
	return nodeNetns{f: os.NewFile(uintptr(fd), "node netns")}
}

// forwardLoopback starts the pod's port-forward catcher, in this
// process's network namespace (the pod's). Without one the pod runs
// anyway: only port-forward through containerd fails, as it did before.
func (p *pod) forwardLoopback(node nodeNetns) {
	logger := log.L.WithField("pod", p.id)
	if p.netns == "" {
		return // no pod network namespace (ctr run): nothing to forward to
	}
	if node.err != nil {
		logger.WithError(node.err).Warn("port-forward to the guest will fail")
		return
	}
	f, err := portfwd.Start(portfwd.Options{
		NodeNetns: node.f,
		Target:    func() (netip.Addr, error) { return portfwd.InterfaceIPv4(ocikeys.PodInterface) },
		// containerd reports each failure to the client; a pod that
		// makes many must not fill the node's log.
		OnError: func(err error) { logger.WithError(err).Debug("port-forward") },
	})
	if err != nil {
		logger.WithError(err).Warn("port-forward to the guest will fail")
		return
	}
	p.fwd = f
}
