package vm

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/vmpod/vmpod/pkg/virt"
)

// Exit is how a VM ended, in a container's terms. A guest has no exit
// status of its own but 0 (it powered off), so every other status is the
// runtime's, one per way a VM ends:
//
//	status  Reason         the VM ended because
//	0       Completed      the guest powered off
//	2       GuestPanicked  the guest kernel panicked (pvpanic; on_crash destroys the VM)
//	137     Killed         it was stopped hard: on request (SIGKILL, a grace period's end), or QEMU was
//	                       stopped by a signal it caught (QEMU says it was a signal, not which one)
//	137     OOMKilled      the kernel's OOM killer ended QEMU in the container's memory cgroup
//	128+n   QEMUKilled     QEMU died of signal n that the runtime did not send (SIGKILL 137,
//	                       SIGSEGV 139, SIGABRT 134); Message names the signal
//	1       QEMUFailed     QEMU exited, with no guest power-off, of its own accord; or it died and
//	                       the kernel would not say how (before Linux 6.15, see qemuProc)
//
// The containerd shim can pass on the status only (containerd's TaskExit
// has no reason: the kubelet then shows "Error"); it writes Reason and
// Message as the last line of the serial console, so `kubectl logs
// --previous` shows them. The CRI server sets ContainerStatus's reason
// and message from them.
type Exit struct {
	// Status is the container's exit status (the table above).
	Status uint32
	// Reason is a short CamelCase word for the kubelet's termination
	// reason (the table above).
	Reason string
	// Message says more, for people.
	Message string
}

// ExitGuestPanicked is the exit status of a VM whose guest kernel panicked.
const ExitGuestPanicked = 2

// exitFor is the exit of a VM that stopped for r, with QEMU's wait status
// ws when the kernel told it (known). killed says the runtime stopped the
// VM hard.
func exitFor(r virt.StopReason, killed bool, ws unix.WaitStatus, known bool) Exit {
	if known && ws.Signaled() && r != virt.StopGuestShutdown && r != virt.StopCrashed && !(killed && r == virt.StopDestroyed) {
		sig := ws.Signal()
		msg := fmt.Sprintf("QEMU was killed by %s", signalName(sig))
		if ws.CoreDump() {
			msg += " (core dumped)"
		}
		return Exit{Status: 128 + uint32(sig), Reason: "QEMUKilled", Message: msg}
	}
	switch r {
	case virt.StopGuestShutdown:
		return Exit{Status: 0, Reason: "Completed", Message: "the guest powered off"}
	case virt.StopDestroyed:
		if killed {
			return Exit{Status: 128 + uint32(unix.SIGKILL), Reason: "Killed", Message: "stopped hard on request"}
		}
		return Exit{Status: 128 + uint32(unix.SIGKILL), Reason: "Killed", Message: "the VM was stopped hard, not on the runtime's request"}
	case virt.StopCrashed:
		return Exit{Status: ExitGuestPanicked, Reason: "GuestPanicked", Message: "the guest kernel panicked"}
	case virt.StopFailed:
		msg := "QEMU exited unexpectedly"
		if known && ws.Exited() {
			msg = fmt.Sprintf("QEMU exited unexpectedly with status %d", ws.ExitStatus())
		}
		return Exit{Status: 1, Reason: "QEMUFailed", Message: msg}
	default:
		return Exit{Status: 1, Reason: "QEMUFailed", Message: fmt.Sprintf("the VM stopped (%s)", r)}
	}
}

// uncertain says a stop for r may be QEMU's death, whose cause only its
// wait status tells.
func uncertain(r virt.StopReason) bool {
	return r == virt.StopFailed || r == virt.StopUnknown
}

// consoleNote is the line the serial console ends with for an exit other
// than a power-off.
func (e Exit) consoleNote() string {
	if e.Status == 0 {
		return ""
	}
	return fmt.Sprintf("vmpod: %s (%s, exit status %d)", e.Message, e.Reason, e.Status)
}
