package virt

import "time"

// Info is a domain's state at one moment.
type Info struct {
	State State
	// Reason says why the domain is in StateShutoff or StateCrashed;
	// StopNone in every other state.
	Reason StopReason
	// PID is the QEMU process, 0 when none runs (or the hypervisor has no
	// processes, like libvirt's test driver).
	PID int
	// Log is the file QEMU's stderr goes to while it runs, "" when the
	// hypervisor keeps none. QEMU holds it open for appending, so it may
	// be cut short under it.
	Log string
	// PausedOnIOError: in StatePaused because QEMU stopped the vCPUs on
	// a failed disk write (EventPausedOnIOError).
	PausedOnIOError bool
}

// Stats is resource usage of a running domain. Counters are cumulative
// since QEMU started; a field the hypervisor does not report is 0.
type Stats struct {
	// CPUTime is the CPU time QEMU used, vCPUs and emulator threads.
	CPUTime time.Duration
	// MemoryActual is the guest RAM in bytes the balloon leaves the guest:
	// all of it when there is no balloon driver in the guest.
	MemoryActual uint64
	// MemoryRSS is QEMU's resident set in bytes: what the VM costs the host,
	// overhead included.
	MemoryRSS uint64
	// Block sums all disks. (The guest's network is the pod's: its
	// counters are the pod interface's, read in the pod's namespace; the
	// hypervisor, in the node's, does not see the tap.)
	Block BlockStats
}

// BlockStats are disk I/O totals.
type BlockStats struct {
	ReadBytes, WriteBytes uint64
	ReadOps, WriteOps     uint64
}

// Size is what a running domain has plugged, from its live definition.
type Size struct {
	// VCPUs are plugged into QEMU, of MaxVCPUs. The guest decides how
	// many of them are online.
	VCPUs, MaxVCPUs int
	// HotplugRequestedBytes is what the domain's hot-pluggable (virtio-mem)
	// memory was last asked to hold, of HotplugMaxBytes; both 0 without
	// such memory. HotplugPluggedBytes is what the guest holds of memory
	// added live: the virtio-mem device's plugged blocks plus every DIMM.
	// The guest's whole RAM is its boot memory plus HotplugPluggedBytes.
	HotplugRequestedBytes, HotplugPluggedBytes, HotplugMaxBytes uint64
	// DIMMs are plugged into DIMMSlots slots (<maxMemory slots>, 0 in a
	// domain without room for memory devices), DIMMBytes in all. A DIMM
	// being unplugged counts until the guest has ejected it.
	DIMMs, DIMMSlots int
	DIMMBytes        uint64
}
