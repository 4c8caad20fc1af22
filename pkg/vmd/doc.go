// Package vmd is the node's VMs: one Service per node owns the node's
// hypervisor connection (one embedded libvirt root), every VM on it, their
// checkpoints, the exit of each, the guest agents' exec policy and the
// recovery of the VMs an earlier process left running. A front door (the
// CRI server in the same process; the containerd shim through the node
// API) names a VM by its container id and asks for it in vm.Request's
// terms; everything a VM's life needs beyond its protocol is written here
// once.
//
//	Create ──► created ──Start──► running ──(the VM stops)──► stopped
//	              │                                              ▲
//	              └──────── Stop or Kill (never started) ────────┘
//
// A VM that stops is deleted at once (its console drained, then vm.Delete:
// domain, tap, cgroup, devices, mounts): a stopped VM holds nothing but
// its record, with its exit, until Remove forgets it. While Create,
// Start, Stop, Kill of a created VM or Remove runs, the VM is busy and a
// second such caller gets FailedPrecondition; exec, the console, stats
// and update borrow the running VM (use) and give it back before it is
// deleted.
//
// Each VM's record (its spec, pod, network, what it holds as pkg/vm
// reports it, its state and exit) is checkpointed atomically under
// <state root>/vms. Recover, at the start of a new process, takes each
// running VM over (vm.Adopt: the same QEMU runs on) and undoes what any
// other one held.
//
// The VM's network attach, start and adoption act in the calling
// thread's network namespace, so they run on a thread locked in the
// pod's (internal/nsthread).
//
// It may import pkg/vm, pkg/vmspec, pkg/node and pkg/node/embedded (to
// open the node's hypervisor), pkg/virt, pkg/podcgroup, pkg/jail,
// internal/ckpt, internal/nsthread, containerd's errdefs, log and mount
// packages, the OCI runtime spec and the standard library; never a front
// door (pkg/cri, pkg/shim) or their protocols.
package vmd
