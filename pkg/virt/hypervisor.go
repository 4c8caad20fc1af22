package virt

import (
	"context"
	"time"
)

// Hypervisor runs domains. Domains are named by their libvirt name, which
// is unique per connection.
//
// Implementations are safe for concurrent use. A call cannot be interrupted
// once it reached the hypervisor; ctx is honoured before that.
type Hypervisor interface {
	// Capabilities returns libvirt's host capabilities XML and the domain
	// capabilities XML for the host arch and the domain type virtType
	// ("kvm" or "qemu"; "" for the best libvirt offers: kvm when /dev/kvm
	// opens, which does not mean that a guest runs under it).
	Capabilities(ctx context.Context, virtType string) (caps, domainCaps string, err error)

	// Define stores a domain definition. It fails with AlreadyExists if a
	// domain of that name exists (libvirt would silently replace it), and
	// with InvalidArgument if the XML is malformed or fails libvirt's schema.
	Define(ctx context.Context, domainXML string) error

	// Start boots a defined domain; with opts.Paused QEMU is created with its
	// vCPUs stopped, so limits can be applied before the guest runs.
	// FailedPrecondition if it is already running.
	Start(ctx context.Context, name string, opts StartOptions) error

	// Resume lets the vCPUs of a paused domain run; nil if they already
	// run, FailedPrecondition if there is no QEMU to resume.
	Resume(ctx context.Context, name string) error

	// Suspend stops the vCPUs; QEMU and guest memory stay. nil if already
	// paused, FailedPrecondition if not running.
	Suspend(ctx context.Context, name string) error

	// SetMemoryHardLimit sets the memory cgroup limit of a running or paused
	// domain's QEMU (libvirt's memtune hard_limit), rounded up to KiB. It is
	// applied live because setting it in the XML fails without
	// CAP_SYS_RESOURCE; FailedPrecondition on a stopped domain.
	SetMemoryHardLimit(ctx context.Context, name string, bytes uint64) error

	// Size reports how many vCPUs are plugged into a running or paused
	// domain and what its hot-pluggable memory holds, from the live
	// definition: what the VM has now, not what it was started with.
	// FailedPrecondition when it is not running.
	Size(ctx context.Context, name string) (Size, error)

	// PlugVCPUs hot-plugs vCPUs into a running or paused domain until n
	// are plugged (at most its maximum, <vcpu>); nil when n already are.
	// It never unplugs: a guest gives vCPUs back by taking them offline,
	// as unplug needs the guest's ACPI eject, which libvirt 9.0 stops
	// waiting for after 5 s and then never records (seen under TCG).
	// InvalidArgument above the maximum; FailedPrecondition when the
	// domain is not running.
	PlugVCPUs(ctx context.Context, name string, n int) error

	// RequestHotplugMemory asks the guest of a running or paused domain to
	// hold bytes of its hot-pluggable (virtio-mem) memory, growing or
	// shrinking it, and returns without waiting: the guest plugs or
	// unplugs blocks as it can, and Size reports how far it got. bytes is
	// a multiple of the device's block. InvalidArgument when the domain
	// has no such memory or bytes exceeds it; FailedPrecondition when it
	// is not running.
	RequestHotplugMemory(ctx context.Context, name string, bytes uint64) error

	// PlugDIMM hot-plugs one DIMM of bytes into NUMA node 0 of a running
	// or paused domain, into a free slot of its <maxMemory>; the guest
	// sees it at once (ACPI) and onlines it as its kernel is told to.
	// InvalidArgument when no slot is free or bytes is not a whole
	// number of MiB; FailedPrecondition when the domain is not running.
	PlugDIMM(ctx context.Context, name string, bytes uint64) error

	// UnplugDIMM asks the guest of a running domain to eject the DIMM
	// plugged last and returns without waiting for it: the guest must
	// first offline all of its memory, which it may never manage (memory
	// it cannot move). The DIMM is gone when Size no longer counts it.
	// NotFound when no DIMM is plugged; FailedPrecondition when the
	// domain is not running.
	UnplugDIMM(ctx context.Context, name string) error

	// Snapshot captures a running or paused domain without stopping it:
	// its memory goes to req.StateFile (a save image, which Restore
	// starts a domain from), and its disk on req.Disk, frozen, stops
	// taking writes, which go to req.Top from then on. The caller makes
	// Top, a qcow2 over Disk, where the domain's emulator can open it,
	// copies the frozen Disk, and has CommitTop fold Top back into it.
	// Every other disk is left as it is and not captured. The domain is
	// left paused, on error too: the caller resumes it (its disks take
	// writes again only then). FailedPrecondition when it is not running
	// or cannot be captured (a device whose state cannot be saved, a
	// block job on the disk), with the hypervisor's reason.
	Snapshot(ctx context.Context, name string, req SnapshotRequest) error

	// CommitTop merges top, the active layer of a running domain's disk
	// (a Snapshot's Top), into the file below it, which then takes the
	// writes again, and returns when top is out of use: the caller
	// removes it. nil at once when no disk is on top (a Snapshot that
	// failed before it switched, or a commit that completed). It waits for the merge, bounded by ctx; cancelled, the
	// disk stays on top.
	CommitTop(ctx context.Context, name, top string) error

	// SavedDefinition is the domain XML a state file (Snapshot's
	// StateFile) was saved with, as the hypervisor reads it. The file is
	// read by the hypervisor: give it only files this node wrote or
	// checked. InvalidArgument when it is not a state file.
	SavedDefinition(ctx context.Context, file string) (string, error)

	// Restore starts the defined, stopped domain name from a state file
	// instead of booting it, with its vCPUs stopped (Resume runs them).
	// The definition must describe the same virtual hardware the state
	// was saved from (SavedDefinition); only where things are on the
	// host may differ. InvalidArgument when it does not, or the file is
	// not a whole state file; FailedPrecondition when the domain runs.
	Restore(ctx context.Context, name, file string) error

	// CopyStateAs writes dst, a new file: a copy of the state file src
	// whose saved definition names another domain, name with uuid, and
	// is otherwise the same, so that a second domain can be restored from
	// the same state beside the first (the hypervisor's check of the
	// definition compares both). InvalidArgument when src is not a
	// whole state file or the new definition would not fit in it;
	// NotImplemented where state files are the hypervisor's own (the
	// test driver).
	CopyStateAs(ctx context.Context, src, dst, name, uuid string) error

	// SetLink takes the link of each of a running or paused domain's
	// network interfaces down or up, as a cable pulled and plugged in:
	// the guest sees its carrier go and come back. A restored guest is
	// told so that it is on another network, and its DHCP client asks
	// for its address again. FailedPrecondition when it is not running;
	// nil when it has no interface or each is in that state already;
	// NotImplemented where the hypervisor cannot update devices
	// (libvirt's test driver).
	SetLink(ctx context.Context, name string, up bool) error

	// Shutdown presses the ACPI power button and returns; the guest decides
	// whether and when it powers off (watch Events or Info).
	// FailedPrecondition if not running.
	Shutdown(ctx context.Context, name string) error

	// Destroy stops QEMU hard. It returns nil if the domain is already
	// stopped.
	Destroy(ctx context.Context, name string) error

	// Undefine removes the definition (and UEFI variables); NotFound if
	// there is none. A running domain keeps running until stopped.
	Undefine(ctx context.Context, name string) error

	// Info reports state, why the domain stopped, and QEMU's pid.
	Info(ctx context.Context, name string) (Info, error)

	// Stats reports resource usage of a running or paused domain;
	// FailedPrecondition when it is not running.
	Stats(ctx context.Context, name string) (Stats, error)

	// AgentCommand sends one command to the QEMU guest agent in a running
	// domain: a JSON object such as {"execute":"guest-ping"}, answered with
	// the agent's whole reply ({"return":...}). The reply comes from the
	// guest, so it is untrusted input. timeout bounds the wait for it
	// (whole seconds, at least one) and so does ctx's deadline.
	//
	// Errors: FailedPrecondition when the domain is not running or has no
	// guest agent channel; Unavailable when no agent runs in the guest (it
	// never opened its port) or it did not answer in time; InvalidArgument
	// when the agent refused the command, with the agent's reason (an
	// unknown command, a program guest-exec cannot start);
	// NotImplemented where the hypervisor has no guest agents (libvirt's
	// test driver).
	AgentCommand(ctx context.Context, name, command string, timeout time.Duration) (string, error)

	// List returns the names of all domains, running or not.
	List(ctx context.Context) ([]string, error)

	// Events delivers lifecycle events for all domains of this connection
	// until Close, which closes the channel. Events are never dropped, so a
	// consumer that stops reading makes them queue in memory.
	Events() <-chan Event

	// Close releases the connection. Running domains keep running; a new
	// connection to the same place re-attaches to them.
	Close() error
}

// SnapshotRequest is what Snapshot captures, and where.
type SnapshotRequest struct {
	// StateFile receives the memory; it must not exist.
	StateFile string
	// Disk is the file of the disk captured (the disk's active layer);
	// "" captures memory only.
	Disk string
	// Top is an empty qcow2 whose backing file is the disk's file: the
	// disk's writes go there from the snapshot on.
	Top string
	// Emulator, when set, is the emulator the state file's definition
	// names instead of the domain's own (vmpod's jailer link, whose path
	// is the node's): libvirt parses that definition whenever it reads
	// the file and refuses it where its emulator is missing, so a state
	// file meant for other nodes names one they all have (QEMU itself).
	Emulator string
}

// StartOptions tune Start.
type StartOptions struct {
	// Paused starts QEMU with stopped vCPUs; call Resume to run the guest.
	Paused bool
}
