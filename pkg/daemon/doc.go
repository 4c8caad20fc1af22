// Package daemon is vm-runtime daemon's node API: the node's VMs
// (pkg/vmd) served over ttrpc (api/node/v1) on a root-only unix socket,
// for the containerd shims of the node's VM pods.
//
// A shim hands over what containerd handed it (the container's OCI spec,
// its bundle and rootfs mounts, the pod's network namespace) and the
// daemon makes the VM from it (vmd.FromOCI); the shim then only
// translates the task API. What the daemon keeps per VM beyond pkg/vmd is
// the protocol's: the console output since the VM started, up to
// consoleBacklog bytes, for the shim to stream (and stream again from
// where it was after a lost connection), and the cancel of each exec in
// flight.
//
// At its start, after taking running VMs over, the daemon releases the
// stopped VMs of pods no shim serves any more (after a reboot nobody
// else would): it finds the shims by their command lines in /proc, so it
// must share their PID namespace, as the systemd unit on the host and a
// kind node's processes do.
//
// Errors keep their errdefs class and become ttrpc status codes once,
// in the interceptor (and in the two streaming calls, which it does not
// see).
//
// It may import api/node/v1, pkg/vmd, pkg/vm (its request types),
// containerd's errdefs, log, mount and typeurl packages, ttrpc, the OCI
// runtime spec and the standard library.
package daemon
