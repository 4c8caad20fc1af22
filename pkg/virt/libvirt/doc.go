// Package libvirt implements virt.Hypervisor on libvirt: the embedded QEMU
// driver (OpenEmbedded) for real VMs and the built-in test driver
// (OpenTest) for unit tests. It is the only package in vmpod that uses cgo:
// libvirt's binding, and glibc's malloc knobs (malloc.go) for the memory
// libvirt's threads leave in malloc arenas.
//
// Imports: pkg/virt, libvirt.org/go/libvirt, libvirt.org/go/libvirtxml,
// github.com/containerd/errdefs and the standard library. Nothing else in
// vmpod may import libvirt.org/go/libvirt.
//
// # The embedded driver
//
// As seen with libvirt 9.0 and QEMU 7.2 on Debian 12, as root, without
// KVM, on cgroup v1.
//
// Process: libvirt needs an event loop before the first connect
// (startEventLoop runs one for the whole process). One embed root per
// process: opening a second root fails, reopening the same root works and
// re-attaches. QEMU is not a child that dies with us: it keeps running after
// Close and after the process exits, and the next process re-attaches.
//
// Layout under <root>: etc/qemu.conf (ours) and etc/qemu/<name>.xml
// (definitions); run/qemu/<name>.pid (QEMU's pid, what Info reports),
// run/qemu/<name>.xml (live status), run/qemu/driver.pid (the process that
// opened the root); lib/qemu/domain-<id>-<name>/monitor.sock;
// log/qemu/<name>.log (QEMU's stderr, as there is no virtlogd);
// cache/qemu/capabilities/<sha256 of emulator path>.xml (the probe cache;
// the names do not depend on the root, so the files copy between roots, see
// EmbedOptions.CacheDir).
//
// Capabilities: libvirt probes lazily; the first call needing them on a
// cold root (host capabilities probe every qemu-system-* installed, here
// x86_64 and i386) took 4.3-6.4 s, and 0.1-0.4 s with a warm cache.
// OpenEmbedded pays it at open.
//
// Users: as root, libvirt resolves the QEMU user and group it was built
// with ("libvirt-qemu" on Debian) before it reads qemu.conf, so the open
// fails ("Failed to parse user 'libvirt-qemu'") on hosts without them even
// though qemu.conf says root. Debian creates them with libvirt-daemon-system,
// which vmpod does not need otherwise. OpenEmbedded reports this as
// FailedPrecondition; the tests bind-mount an /etc/passwd with the user in
// a private mount namespace instead of changing the host.
//
// cgroups: QEMU goes into <hierarchy>/machine/qemu-embed-<first 8 hex of
// sha256(root)>-<domain id>-<name>.libvirt-qemu in every v1 hierarchy
// (cpu, cpuset, memory, blkio, freezer) and in the hybrid unified one,
// with emulator/ and vcpuN/ below in cpu, cpuset and unified. That is at
// the top of each hierarchy, not below the cgroup of the opening process,
// so it is outside a pod's cgroup unless the domain XML picks a
// <resource><partition>. memtune hard_limit lands in memory.limit_in_bytes
// there. libvirt removes the dirs when it stops a domain it watched, but
// not for a QEMU it found dead on re-attach, nor when Destroy raced the
// re-attach that libvirt runs in the background after connect (the
// "VIR_ERR_NO_DOMAIN / not running after killing QEMU" case: Destroy fails
// with "domain is not running", the state becomes shutoff/failed, no
// Stopped event, cgroups stay). OpenEmbedded therefore waits the re-attach
// out, and Destroy, Undefine and Close remove leftover dirs of this root
// that no running QEMU of the root is in.
//
// Guest agent: libvirt connects to the agent channel's socket only once
// QEMU reports that the guest opened its port (VSERPORT_CHANGE), so a
// guest without qemu-ga fails an agent command at once with
// AGENT_UNRESPONSIVE ("QEMU guest agent is not connected"), and a domain
// without the channel with ARGUMENT_UNSUPPORTED ("not configured"). An
// error reply of the agent itself comes back as INTERNAL_ERROR whose
// message holds "unable to execute QEMU agent command"; AgentCommand calls
// that InvalidArgument (the caller asked for something the guest refused,
// e.g. guest-exec of a program that does not exist). Measured under TCG
// with the test guest: guest-ping, guest-exec of `true` and the
// guest-exec-status polls that see it exit take 11-30 ms together.
//
// Events: libvirt creates QEMU paused, so a start sends Resumed then
// Started; Destroy sends Shutdown (host) then Stopped (destroyed); a QEMU
// killed under us sends Stopped (failed) while Info says crashed.
//
// # The test driver
//
// test:///default is one state per process in libvirt 9, shared by all
// connections (not fresh per connection), and it starts with a running
// domain "test". It lacks START_PAUSED (emulated by start then suspend),
// the ACPI shutdown and NVRAM undefine flags, domain capabilities and
// I/O stats, and reports state errors as internal errors (Conn checks
// states itself so both drivers answer FailedPrecondition).
package libvirt
