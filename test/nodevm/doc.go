// Package nodevm runs vmpod on the kind of node users run, which this
// machine is not: cgroup v2 with systemd as PID 1. The test boots such a
// node as a VM over this machine's own root (internal/testenv/nodevm) and
// runs its own test binary inside it, where it
//
//   - runs pkg/podcgroup's driver tests on cgroup v2, cgroupfs and systemd;
//   - starts containerd 2.4.2 as a systemd service from kind's node
//     containerd config (runc with SystemdCgroup = true), runs the vmpod
//     installer as its DaemonSet does (same script, mounts and environment,
//     read from manifests/installer), and drives a VM pod with crictl under
//     a systemd pod slice: QEMU must run in the container's scope under the
//     slice with memory.max = guest + overhead, stop must give the exit
//     status, and removal must leave no scope, cgroup, process or file;
//   - does the same with the cgroupfs driver on cgroup v2, through the
//     containerd test harness;
//   - runs vm-runtime cri (a VM-only node's runtime) with the image from a
//     registry on the node's loopback: RuntimeConfig must say systemd, and
//     a VM pod under a systemd pod slice must get QEMU in the scope
//     cri-vmpod-<id>.scope of that slice with memory.max = guest +
//     overhead, and leave nothing when removed.
//
// The nested guest runs under TCG, which is slow: the test waits for the
// kernel's first serial line, not for the guest's /init.
package nodevm
