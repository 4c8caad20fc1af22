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
// embedded libvirt root, which it hands pkg/vm as the vm.Opener (pod.go)
// through pkg/virt/remote: the shim links no libvirt, it starts
// `vm-runtime hypervisor` (the helper) when a call needs libvirt and lets
// it go 5 s after the last, watching QEMU on its monitor meanwhile; or
// the VM (vmTask), a thin translation of the task API onto a vm.VM: the
// OCI spec becomes a vm.Request (vmtask.go), Create/Start/Kill/Delete/
// Stats/Update call the VM's own (SIGTERM presses the ACPI power button,
// and again every few seconds until the VM stops, as a booting guest loses
// a press and containerd sends SIGTERM once; SIGKILL stops it hard), its
// stdio is the guest's serial console
// (console.go), and exec processes run commands in the guest through the
// QEMU guest agent (exec.go). The VM's making and undoing (image, network,
// devices, cloud-init, overhead, cgroup, domain) is pkg/vm's; the shim
// keeps what the VM reports holding (vm.Request.Record) in the task's
// checkpoint, from which the delete command runs vm.Undo after a dead
// shim (cleanup.go). State changes go through task.update; errors are
// classified where they happen and turned into ttrpc status codes once,
// in the interceptor (errors.go).
//
// port-forward: containerd serves it by dialling localhost:<port> inside
// the sandbox's network namespace, where the guest is not reached (the pod
// IP there is the pod interface's own). The sandbox catches those
// connections (pkg/portfwd: a BPF sk_lookup program on the namespace's
// loopback, any port) and forwards each to the pod IP on the same port
// from the node's network namespace, which the start command hands the
// long-lived shim as a descriptor, close-on-exec from the shim's first
// instruction on, so no helper or QEMU holds it (portforward.go). A
// closed guest port resets the connection at once; containerd 2.x reports
// the error to kubectl, 1.7 ends the stream. Without a kernel that can (Linux 5.9, BPF) the
// pod runs and only port-forward through containerd fails.
//
// cgroups: the shim enters its sandbox's cgroup (pkg/podcgroup, cgroup v1
// and v2, either driver), so it and QEMU until the VM moves it into its
// container's cgroup are charged to the pod. A VM task without a
// cgroupsPath it can use is refused: a VM never runs outside its pod's
// limits.
//
// It may import vm, vmspec, node, podcgroup, virt and virt/remote, jail
// (for its uid range setting), portfwd,
// containerd's shim, API and events packages, and the standard library;
// never virt/libvirt or node/embedded, which link libvirt (test/imports);
// nothing imports it but cmd/vm-runtime and cmd/containerd-shim-vmpod-v2.
package shim
