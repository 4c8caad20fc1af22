package vm

import (
	"fmt"

	"github.com/vmpod/vmpod/pkg/virt"
)

// Exit is how a VM ended, in a container's terms.
type Exit struct {
	// Status is the container exit status: 0 when the guest powered off,
	// 137 (128+SIGKILL) when it was stopped hard, 1 when it crashed or
	// QEMU failed.
	Status uint32
	// Reason is a short CamelCase word for the kubelet's termination
	// reason ("Completed", "Killed", "GuestCrashed", "QEMUFailed").
	Reason string
	// Message says more, for people.
	Message string
}

func exitFor(r virt.StopReason) Exit {
	switch r {
	case virt.StopGuestShutdown:
		return Exit{Status: 0, Reason: "Completed", Message: "the guest powered off"}
	case virt.StopDestroyed:
		return Exit{Status: 137, Reason: "Killed", Message: "the VM was stopped hard"}
	case virt.StopCrashed:
		return Exit{Status: 1, Reason: "GuestCrashed", Message: "the guest kernel panicked"}
	case virt.StopFailed:
		return Exit{Status: 1, Reason: "QEMUFailed", Message: "QEMU exited unexpectedly"}
	default:
		return Exit{Status: 1, Reason: "Unknown", Message: fmt.Sprintf("the VM stopped (%s)", r)}
	}
}
