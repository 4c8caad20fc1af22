// Package shim is vmpod's containerd runtime v2 shim: the task API over
// ttrpc (containerd.task.v3, and v2 through a re-marshalling adapter for
// containerd 1.7 and CRI-O, taskv2.go), served by containerd's own
// pkg/shim, for one pod. containerd runs it as containerd-shim-vmpod-v2 for
// RuntimeClass handlers whose runtime_type is io.containerd.vmpod.v2. The
// start command answers both bootstrap protocols (bootstrap.go).
//
// One shim process serves one pod. A task has a state machine and a body:
// the sandbox (sandboxBody), which holds the pod: its network namespace
// (the shim process lives in it, see manager.go), its state dir and its
// embedded libvirt; or the VM (vmTask): Create defines it, Start boots it,
// its stdio is the guest's serial console, and exec processes run commands
// in the guest through the QEMU guest agent (exec.go). The shim translates
// the OCI spec into pkg/vm's calls (image, network, devices, cloud-init,
// overhead, the machine) and records what the VM holds in a checkpoint;
// vm.Undo removes it, in the normal teardown and after a dead shim alike.
// State changes go through task.update; errors are classified where they
// happen and turned into ttrpc status codes once, in the interceptor
// (errors.go).
//
// cgroups: the shim enters its sandbox's cgroup, and QEMU, started paused,
// moves into the VM container's cgroup with its memory limit (guest RAM plus
// overhead) and CPU quota and weight before the guest runs; pkg/podcgroup
// does it for cgroup v1 and v2 with either cgroup driver. A VM task without
// a cgroupsPath it can use is refused: a VM never runs outside its pod's
// limits.
//
// It may import vm, vmspec, host, node, jail, podnet, podcgroup, virt and
// virt/libvirt, containerd's shim, API and events packages, and the
// standard library; nothing imports it but cmd/vm-runtime.
package shim
