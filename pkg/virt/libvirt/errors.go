package libvirt

import (
	"errors"
	"fmt"

	"github.com/containerd/errdefs"
	lv "libvirt.org/go/libvirt"
)

// classify turns an error from the libvirt binding into one that carries an
// errdefs class, prefixed with subject (e.g. `domain "x"`). This is the only
// place that knows libvirt's error codes; everything else asks errdefs.
//
// The libvirt error itself is not wrapped, so callers cannot reach for
// libvirt types; its message and code stay in the text for people.
func classify(err error, subject string) error {
	if err == nil {
		return nil
	}
	var le lv.Error
	if !errors.As(err, &le) {
		return fmt.Errorf("%s: %w", subject, err)
	}
	return fmt.Errorf("%s: %w: %s (libvirt code %d)", subject, class(le.Code), le.Message, int(le.Code))
}

// class picks the errdefs class for a libvirt error code.
func class(code lv.ErrorNumber) error {
	switch code {
	case lv.ERR_NO_DOMAIN, lv.ERR_NO_DOMAIN_SNAPSHOT, lv.ERR_NO_DOMAIN_CHECKPOINT,
		lv.ERR_NO_DOMAIN_METADATA, lv.ERR_NO_DOMAIN_BACKUP, lv.ERR_DEVICE_MISSING:
		return errdefs.ErrNotFound

	case lv.ERR_DOM_EXIST:
		return errdefs.ErrAlreadyExists

	// The caller's XML or arguments are wrong, or ask for something this
	// libvirt/QEMU cannot express: the caller must change the request.
	case lv.ERR_XML_ERROR, lv.ERR_XML_DETAIL, lv.ERR_XML_INVALID_SCHEMA,
		lv.ERR_INVALID_ARG, lv.ERR_CONFIG_UNSUPPORTED, lv.ERR_OS_TYPE,
		lv.ERR_NO_NAME, lv.ERR_INVALID_MAC, lv.ERR_NO_OS, lv.ERR_NO_KERNEL:
		return errdefs.ErrInvalidArgument

	// The request is fine but the domain is in the wrong state (start a
	// running domain, pause a stopped one) or the host CPU cannot host it.
	case lv.ERR_OPERATION_INVALID, lv.ERR_CPU_INCOMPATIBLE, lv.ERR_MIGRATE_UNSAFE:
		return errdefs.ErrFailedPrecondition

	case lv.ERR_NO_SUPPORT, lv.ERR_OPERATION_UNSUPPORTED, lv.ERR_ARGUMENT_UNSUPPORTED:
		return errdefs.ErrNotImplemented

	// Worth retrying: the connection, the guest agent or a job lock was
	// busy or gone ("cannot acquire state change lock" is a timeout).
	case lv.ERR_NO_CONNECT, lv.ERR_INVALID_CONN, lv.ERR_RPC, lv.ERR_OPERATION_TIMEOUT,
		lv.ERR_RESOURCE_BUSY, lv.ERR_AGENT_UNRESPONSIVE, lv.ERR_AGENT_UNSYNCED:
		return errdefs.ErrUnavailable

	case lv.ERR_OPERATION_DENIED, lv.ERR_ACCESS_DENIED, lv.ERR_AUTH_FAILED,
		lv.ERR_AUTH_CANCELLED, lv.ERR_AUTH_UNAVAILABLE:
		return errdefs.ErrPermissionDenied

	case lv.ERR_NO_MEMORY:
		return errdefs.ErrResourceExhausted

	case lv.ERR_OPERATION_ABORTED:
		return errdefs.ErrAborted

	// libvirt, QEMU or the host failed at something that should have
	// worked (QEMU exited during start, a syscall failed, a file is
	// missing). Not the caller's fault and not fixed by retrying blindly.
	case lv.ERR_INTERNAL_ERROR, lv.ERR_OPERATION_FAILED, lv.ERR_SYSTEM_ERROR,
		lv.ERR_OPEN_FAILED, lv.ERR_READ_FAILED, lv.ERR_WRITE_FAILED:
		return errdefs.ErrInternal

	default:
		return errdefs.ErrUnknown
	}
}

// code returns the libvirt error code in err, or ERR_OK if err is not a
// libvirt error. Used where one code changes the outcome (Destroy of a
// stopped domain is a success), never to build messages.
func code(err error) lv.ErrorNumber {
	var le lv.Error
	if errors.As(err, &le) {
		return le.Code
	}
	return lv.ERR_OK
}
