package virt

import "strconv"

// Event is one lifecycle change of one domain.
type Event struct {
	Domain string
	Type   EventType
	// Reason says why, for EventStopped, EventShutdown and EventCrashed;
	// StopNone otherwise.
	Reason StopReason
}

// EventType is what happened to a domain.
type EventType int

const (
	EventUnknown EventType = iota
	// EventDefined: a definition was added or replaced.
	EventDefined
	// EventUndefined: the definition was removed.
	EventUndefined
	// EventStarted: a new QEMU process runs the domain. libvirt creates
	// QEMU with stopped vCPUs, so a plain start sends EventResumed then
	// EventStarted, and a paused start EventStarted then EventSuspended.
	EventStarted
	// EventSuspended: the vCPUs stopped (Suspend, paused start, or QEMU
	// paused the guest on its own, e.g. on an I/O error).
	EventSuspended
	// EventResumed: the vCPUs run again, including after a wake-up from
	// guest suspend-to-RAM (same QEMU process, so not EventStarted).
	EventResumed
	// EventStopped: the QEMU process is gone; Reason says why.
	EventStopped
	// EventShutdown: QEMU is shutting down. Reason is StopGuestShutdown
	// when the guest powered off (by itself or answering Shutdown), and
	// StopDestroyed when QEMU got a signal (Destroy sends one). EventStopped
	// follows once QEMU has exited.
	EventShutdown
	// EventCrashed: the guest panicked. Depending on on_crash, EventStopped
	// follows or the domain stays in StateCrashed.
	EventCrashed
	// EventPMSuspended: the guest suspended itself to RAM.
	EventPMSuspended
	// EventPausedOnIOError: QEMU stopped the vCPUs because a write to a
	// disk failed and the disk's error policy says stop (QEMU's default
	// for ENOSPC: the host file system holding the disk is full). The
	// guest waits, unaware, until Resume; EventResumed follows it.
	EventPausedOnIOError
)

func (t EventType) String() string {
	switch t {
	case EventUnknown:
		return "unknown"
	case EventDefined:
		return "defined"
	case EventUndefined:
		return "undefined"
	case EventStarted:
		return "started"
	case EventSuspended:
		return "suspended"
	case EventResumed:
		return "resumed"
	case EventStopped:
		return "stopped"
	case EventShutdown:
		return "shutdown"
	case EventCrashed:
		return "crashed"
	case EventPMSuspended:
		return "pm-suspended"
	case EventPausedOnIOError:
		return "paused-on-io-error"
	default:
		return "EventType(" + strconv.Itoa(int(t)) + ")"
	}
}

// StopReason says why a domain stopped. pkg/vm turns it into the
// container's exit status: a guest power-off is a clean exit, the others
// are not.
type StopReason int

const (
	// StopNone: not stopped, or the event is not about stopping.
	StopNone StopReason = iota
	// StopUnknown: stopped, and the hypervisor does not say why (also a
	// domain that never ran).
	StopUnknown
	// StopGuestShutdown: the guest powered itself off.
	StopGuestShutdown
	// StopDestroyed: someone called Destroy.
	StopDestroyed
	// StopCrashed: the guest panicked, or QEMU died. libvirt 9 records
	// every unexpected QEMU exit as "crashed" in the state (Info), also one
	// it finds on re-attach, while its event for an exit it watched says
	// StopFailed.
	StopCrashed
	// StopFailed: QEMU died under a watching connection (EventStopped),
	// or failed to start.
	StopFailed
	// StopOther: the guest state moved elsewhere (saved, migrated, reverted
	// to a snapshot). vmpod does none of these.
	StopOther
)

func (r StopReason) String() string {
	switch r {
	case StopNone:
		return "none"
	case StopUnknown:
		return "unknown"
	case StopGuestShutdown:
		return "guest-shutdown"
	case StopDestroyed:
		return "destroyed"
	case StopCrashed:
		return "crashed"
	case StopFailed:
		return "failed"
	case StopOther:
		return "other"
	default:
		return "StopReason(" + strconv.Itoa(int(r)) + ")"
	}
}
