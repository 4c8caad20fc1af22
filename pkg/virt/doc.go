// Package virt is the narrow hypervisor interface the rest of vmpod sees.
//
// It holds the handful of operations pkg/vm needs to run one VM (define,
// start, pause, resize the memory limit, stop, remove, observe, talk to the
// guest agent) expressed in
// vmpod's own types, so that no package but pkg/virt/libvirt depends on
// libvirt's Go binding or needs cgo. Domain XML goes in as a string: the
// converter builds it with libvirtxml, and this interface does not care how.
//
// Errors carry a github.com/containerd/errdefs class (NotFound,
// AlreadyExists, InvalidArgument, FailedPrecondition, Unavailable, ...).
// Callers branch with errdefs.IsNotFound and friends, never on message text;
// the messages are for people.
//
// Imports: the standard library and github.com/containerd/errdefs only.
// The implementation lives in pkg/virt/libvirt; tests run it against
// libvirt's test:///default driver and real QEMU rather than a mock.
package virt
