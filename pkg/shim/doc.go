// Package shim is vmpod's containerd runtime v2 shim: the task API over
// ttrpc (containerd.task.v3, and v2 through a re-marshalling adapter for
// containerd 1.7 and CRI-O, taskv2.go), served by containerd's own
// pkg/shim, for one pod. containerd runs it as containerd-shim-vmpod-v2 for
// RuntimeClass handlers whose runtime_type is io.containerd.vmpod.v2. The
// start command answers both bootstrap protocols (bootstrap.go).
//
// One shim process serves one pod. The sandbox task holds the pod: its
// network namespace (the shim process lives in it, see manager.go), its
// state dir and its embedded libvirt. The container task is the VM: Create
// defines it, Start boots it, its stdio is the guest's serial console.
// State changes go through task.update; errors are classified where they
// happen and turned into ttrpc status codes once, in the interceptor
// (errors.go).
//
// It may import vm, vmspec, host, node, podnet, virt and virt/libvirt,
// containerd's shim, API, events and cgroups packages, and the standard
// library; nothing imports it but cmd/vm-runtime.
package shim
