package virt

import "strconv"

// State is where a domain is in its life, as the hypervisor reports it.
//
//	         Define
//	           |
//	           v
//	+------> Shutoff ------ Start{Paused} ------+
//	|          |                                |
//	|          | Start                          v
//	|          v            Suspend
//	|       Running  ---------------------->  Paused
//	|        |  |  ^  <----------------------
//	|        |  |  |        Resume
//	|        |  |  +-- wake-up ---+
//	|        |  |                 |
//	|        |  +-- guest S3 --> PMSuspended
//	|        |
//	|        | Shutdown (ACPI power button), guest acts on it
//	|        v
//	|    ShuttingDown
//	|        |
//	+--------+--- guest powered off, Destroy, or QEMU died
//	             (from Running, Paused, ShuttingDown, PMSuspended)
//
//	Crashed (guest panicked and on_crash=preserve kept QEMU) --Destroy--> Shutoff
//
// With the default on_crash=destroy a panicking guest goes straight to
// Shutoff with reason StopCrashed. Undefine removes a Shutoff domain; Info
// then fails with NotFound.
type State int

const (
	// StateUnknown means the hypervisor did not say (libvirt's NOSTATE).
	StateUnknown State = iota
	// StateShutoff: defined, no QEMU process.
	StateShutoff
	// StateRunning: QEMU runs and so do the vCPUs (libvirt's RUNNING and
	// BLOCKED: a guest waiting for I/O is running for our purposes).
	StateRunning
	// StatePaused: QEMU runs, the vCPUs do not.
	StatePaused
	// StateShuttingDown: the guest is powering off after a request.
	StateShuttingDown
	// StateCrashed: the guest crashed and QEMU was kept for inspection
	// (on_crash=preserve); Destroy ends it.
	StateCrashed
	// StatePMSuspended: the guest suspended itself to RAM.
	StatePMSuspended
)

func (s State) String() string {
	switch s {
	case StateUnknown:
		return "unknown"
	case StateShutoff:
		return "shutoff"
	case StateRunning:
		return "running"
	case StatePaused:
		return "paused"
	case StateShuttingDown:
		return "shutting-down"
	case StateCrashed:
		return "crashed"
	case StatePMSuspended:
		return "pm-suspended"
	default:
		return "State(" + strconv.Itoa(int(s)) + ")"
	}
}

// Active reports whether a QEMU process exists in this state.
func (s State) Active() bool {
	switch s {
	case StateRunning, StatePaused, StateShuttingDown, StatePMSuspended, StateCrashed:
		return true
	default:
		return false
	}
}
