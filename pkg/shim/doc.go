// Package shim is vmpod's containerd runtime v2 shim: the task API over
// ttrpc (containerd.task.v3, and v2 through a re-marshalling adapter for
// containerd 1.7 and CRI-O, taskv2.go), served by containerd's own
// pkg/shim, for one pod. containerd runs it as containerd-shim-vmpod-v2 for
// RuntimeClass handlers whose runtime_type is io.containerd.vmpod.v2. The
// start command answers both bootstrap protocols (bootstrap.go).
//
// One shim process serves one pod, and runs no VM: the node daemon
// (`vm-runtime daemon`, pkg/daemon over pkg/vmd) runs every VM of the
// node, and the shim translates the task API to the node API
// (api/node/v1) through pkg/nodeclient, at $VMPOD_NODE_SOCKET. A task has
// a state machine and a body: the sandbox (sandboxBody), which holds what
// is the pod's in this process: its network namespace (the shim lives in
// it, see manager.go), the sandbox's cgroup, which the shim enters, and
// port-forward's catcher (pod.go); or the VM (vmTask): Create sends the
// OCI spec, bundle, rootfs mounts and the pod's network namespace to the
// daemon (vmtask.go); Start, Kill, Pause, Resume, Update, Stats and Delete
// are the daemon's (SIGTERM presses the ACPI power button, again and
// again in the daemon until the VM stops, as a booting guest loses a
// press and containerd sends SIGTERM once; SIGKILL stops it hard); the
// task's stdio is the guest's serial console, which the daemon holds and
// the shim copies to containerd's FIFOs (console.go); exec processes are
// commands the daemon runs in the guest through the QEMU guest agent,
// with its one exec policy (exec.go). The VM task's exit is the daemon's
// Wait, which, like the console's copy, outlives the daemon's restarts:
// a VM runs on while its daemon restarts, and every other call meanwhile
// is Unavailable, which the caller retries. The delete command, after a
// dead shim, asks the daemon to remove the VM or release the pod
// (cleanup.go). State changes go through task.update; errors are
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
// instruction on (portforward.go). A closed guest port resets the
// connection at once; containerd 2.x reports the error to kubectl, 1.7
// ends the stream. Without a kernel that can (Linux 5.9, BPF) the pod runs
// and only port-forward through containerd fails.
//
// cgroups: the shim enters its sandbox's cgroup (pkg/podcgroup, cgroup v1
// and v2, either driver), so it is charged to the pod; the daemon puts
// QEMU in the VM container's cgroup, and refuses a VM task without a
// cgroupsPath it can use: a VM never runs outside its pod's limits.
//
// It may import api/node/v1, nodeclient, ocikeys (the CRI's annotations),
// podcgroup, portfwd, containerd's shim, API and events packages, and the
// standard library; never pkg/vm, pkg/vmd, pkg/virt or pkg/node, which
// make VMs or link libvirt (test/imports); nothing imports it but
// cmd/vm-runtime and cmd/containerd-shim-vmpod-v2.
package shim
