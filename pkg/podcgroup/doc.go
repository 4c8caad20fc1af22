// Package podcgroup puts a pod's processes (the shim, QEMU) into cgroups
// under the pod's cgroup, on every kind of node the kubelet runs on:
// cgroup v1 or v2, with the kubelet's cgroupfs or systemd driver.
//
// containerd hands a task its cgroupsPath in the OCI spec in the form of the
// node's driver (Parse):
//
//	cgroupfs  /kubepods/burstable/pod<uid>/<id>            a path under each hierarchy
//	systemd   kubepods-burstable-pod<uid>.slice:cri-containerd:<id>
//	          = unit cri-containerd-<id>.scope in that slice, at
//	          /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice/cri-containerd-<id>.scope
//
// With cgroupfs the cgroup is a directory vmpod makes and removes
// (containerd/cgroups' cgroup1 or cgroup2). With systemd it is a transient
// scope unit that systemd makes over D-Bus with the process already in it,
// as runc does; systemd removes it when its last process exits, and Delete
// stops it. Either way the counters (stats, memory events) are read from
// the cgroup's files. There is no silent fallback: a cgroup that cannot be
// made is an error, so a VM never runs outside its pod's limits.
//
// Imports: containerd/cgroups/v3, coreos/go-systemd's dbus, the OCI runtime
// spec, containerd/errdefs and the standard library; no other vmpod package.
package podcgroup
