// Package jail runs QEMU with the least it needs: a uid and gid of its own
// per pod, no capabilities, a mount namespace that shows it its own VM's
// files and nothing else of the host, and a cap on the size of any file it
// writes. QEMU parses what the pod author ships (disk images) and emulates
// devices the guest drives; a QEMU escape lands in this jail, not as root
// on the node.
//
// libvirt starts the domain's <emulator>, which is the jailer: the vm-runtime
// binary called through a link named EmulatorName. libvirt runs it as root
// (qemu.conf: user root, clear_emulator_capabilities 0, security_driver
// none) with QEMU's command line, after libvirt opened and passed what it
// passes as file descriptors (monitor, tap, log). The domain's environment
// names the jail's Spec file (EnvSpec). The jailer then, on its own thread:
//
//  1. makes the VM's writable dir and its subdirs root's (0755) and its
//     other files read-only, then gives the jail's uid and gid the files
//     QEMU writes (Spec.Owned: the overlay, the UEFI store, block volume
//     nodes) and libvirt's per-VM secret file named on the command line,
//     following no link: QEMU creates, renames and removes nothing, so
//     what it adds to the dir is bounded by the files it owns;
//  2. makes IPC and UTS namespaces of its own (no System V IPC object or
//     POSIX message queue of the node, host name "vmpod-qemu") and a
//     private mount namespace, and builds a new root on a small
//     tmpfs: /usr and the merged-/usr links (or /lib, /bin, ... read-only),
//     /etc/ld.so.cache, a /dev with null, zero, full, random, urandom and
//     the devices the spec names (made owned by the uid), a /proc that
//     shows only the jail's own processes (hidepid=invisible, where the
//     kernel has per-mount proc options, 5.8+; else no /proc), the VM's dir
//     read-write at its own path (nosuid, noexec) and the image's files
//     read-only at their own paths; pivots into it and makes it read-only;
//  3. sets RLIMIT_FSIZE to the spec's limit (the guest's disk growth cap:
//     a write past it fails with EFBIG, which QEMU reports to the guest as
//     an I/O error; SIGXFSZ is ignored so QEMU is not killed) and
//     RLIMIT_CORE to 0;
//  4. drops supplementary groups, sets gid and uid, empties every
//     capability set including the bounding and ambient sets, sets
//     no_new_privs, and execs QEMU.
//
// Just before the exec, the jailer installs QEMU's allow-list seccomp
// filter (ProfileQEMU, seccomp_qemu.go), and libvirt's seccomp_sandbox = 1
// makes QEMU install its own deny list on top (-sandbox on,...) once it
// has started.
//
// A tool run on a pod's files runs through the same jailer with a spec of
// its own: the pod's uid, the files it works on and nothing else of the
// host but the system, and, for a tool without a filter of its own, the
// jailer's deny list (ProfileImageTool, seccomp.go). qemu-img was such a
// tool until pkg/vm read the disk's header and wrote the overlay in Go
// (internal/qcow2).
//
// A virtio-fs file server (QEMU 7.2's virtiofsd, for issue 24's volumes)
// runs in a file server's jail: Spec.Shares shows it the pod's volume
// dirs (read-only all through where the volume is), Spec.Capabilities
// keeps it the file-serving capabilities as a uid of its own (never
// root: the securebits no_setuid_fixup and noroot keep its per-request
// uid switches from granting or clearing any), and ProfileVirtiofsd lets
// it build its own sandbox (mount, PID and network namespaces, never a
// user namespace) and refuses sockets, setns, ptrace, BPF and the rest.
// TestJailVirtiofsd runs the real server so, with QEMU connected;
// pkg/vm starts one per share of a VM (pkg/vm/shares.go).
// The jailer exits ExitFailed when it cannot jail or exec the program.
//
// Without EnvSpec the jailer only runs QEMU for libvirt's capability probe
// (-machine none, no -name): a command line that names a guest is refused,
// so no guest ever runs unjailed.
//
// Uids come from a Range of ids no other user of the node has (the default,
// 1879048192-1879113727, is in the block systemd leaves unused); Allocate
// leases one per pod through a file per uid.
//
// The jailer is its own small program, cmd/vmpod-qemu (no cgo, no
// libvirt: it starts in a few milliseconds where vm-runtime, which it
// runs beside, takes about 100 ms and 60 MiB to load, three times per VM
// start). vm-runtime and the test binaries that start VMs are the jailer
// too when called by its name, for a node or a test without
// cmd/vmpod-qemu; Program says which one a runtime links.
//
// jail may import the standard library, golang.org/x/sys, the OCI
// runtime spec and pkg/podcgroup (the container's cgroup, which the
// jailer enters); nothing else of vmpod. pkg/vm uses it; cmd/vmpod-qemu
// and cmd/vm-runtime call Main.
package jail
