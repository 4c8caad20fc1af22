// Package containerd runs a real containerd 2.4.2 (or 1.7.35, with
// Options.Release) for tests, with its CRI plugin, the CNI bridge plugin and
// crictl, the way a Kubernetes node runs it, but private to one test:
//
//   - a network namespace of its own (the node's), holding containerd's
//     loopback, the CNI bridge and every pod IP, plus a veth pair with both
//     ends inside that carries a non-loopback node IP; no packet leaves it;
//   - a private mount namespace (entered with nsenter and unshare -m, as the
//     node recipe in DESIGN.md says, not `ip netns exec`), kept by a holder
//     process so that Restart puts the new containerd next to the old shims
//     and their mounts;
//   - every directory containerd, runc and the CNI plugins write under one
//     short temporary root (unix socket paths stay under 108 bytes);
//   - the sandbox image built by hack/pause/build.sh, imported and pinned, so
//     nothing is pulled; runtimes runc (default) and vmpod
//     (io.containerd.vmpod.v2, pod_annotations vmpod.io/*), the latter found
//     on containerd's PATH in Options.ShimDir.
//
// Cleanup, registered with t.Cleanup and also reachable as Close, stops
// containerd, kills what it started (found by mount namespace, by the root
// path in the command line, or by cgroup; never by name), unmounts, and
// removes the network namespace, the cgroup directories and the root.
//
// Tests need root. The binaries come from hack/containerd/install.sh (1.7:
// install-1.7.sh) and the pause image from hack/pause/build.sh, all cached.
//
// Of vmpod it imports internal/testenv/repo only.
package containerd
