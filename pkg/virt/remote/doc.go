// Package remote runs a virt.Hypervisor in another process, on demand, so
// that a long-lived process (the per-pod shim) need not hold libvirt for
// the pod's whole life.
//
// Serve answers a Hypervisor's calls over a connection (JSON-RPC, one
// request per call, the domain events pulled by long polls). A Client is a
// virt.Hypervisor whose calls go to a helper it spawns when a call comes
// and lets go after Options.Idle without one: the helper (vm-runtime
// hypervisor) opens the pod's embedded libvirt root, which re-attaches to
// the QEMU a previous helper started, and closes it when its connection
// ends. Running domains keep running in between.
//
// While no helper runs the Client watches each running domain's QEMU
// itself, through QEMU's monitor socket (QMP), which libvirt leaves free
// when it closes: a guest power-off (SHUTDOWN from the guest; libvirt
// starts QEMU with -no-shutdown, so QEMU then waits, paused, and the
// Client makes it quit), a guest panic, a signal, or QEMU dying become the
// same virt.Events a connected libvirt sends, so the caller (pkg/vm's
// Runtime) cannot tell the difference. The watch starts with query-status,
// so a power-off while no one listened is not lost. Guest agent commands
// (an exec) go to the agent's channel socket directly while no helper
// runs, with the guest-sync-delimited handshake libvirt uses, so exec
// probes start no libvirt. So do a stop's calls: Shutdown presses the ACPI
// button on the monitor (system_powerdown), Destroy sends QEMU SIGTERM,
// then SIGKILL 10 s later, through the watch's pidfd, as libvirt does;
// libvirt cleans up after the QEMU it finds gone when the next helper
// opens it. Settle lets the helper go as soon as its calls end (after a
// VM's start), so a helper never runs beside a guest that has used its
// RAM. Before the next helper starts, the direct calls end and the watch
// lets go of the monitor, for libvirt.
//
// What goes over the wire keeps its errdefs class (NotFound,
// FailedPrecondition, ...), so callers branch on errors as with an
// in-process Hypervisor. QEMU and the guest are untrusted: the monitor's
// lines are bounded, and a monitor that breaks the protocol gets QEMU
// killed (through a pidfd taken while libvirt vouched for the pid).
//
// Imports: pkg/virt, github.com/containerd/errdefs, github.com/containerd/log,
// golang.org/x/sys/unix and the standard library; no cgo, so the shim
// that uses it links no libvirt.
package remote
