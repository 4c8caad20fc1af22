package libvirt

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	lv "libvirt.org/go/libvirt"
)

func TestClassify(t *testing.T) {
	tests := []struct {
		code lv.ErrorNumber
		is   func(error) bool
	}{
		{lv.ERR_NO_DOMAIN, errdefs.IsNotFound},
		{lv.ERR_DOM_EXIST, errdefs.IsAlreadyExists},
		{lv.ERR_XML_ERROR, errdefs.IsInvalidArgument},
		{lv.ERR_XML_DETAIL, errdefs.IsInvalidArgument},
		{lv.ERR_XML_INVALID_SCHEMA, errdefs.IsInvalidArgument},
		{lv.ERR_INVALID_ARG, errdefs.IsInvalidArgument},
		{lv.ERR_CONFIG_UNSUPPORTED, errdefs.IsInvalidArgument},
		{lv.ERR_OPERATION_INVALID, errdefs.IsFailedPrecondition},
		{lv.ERR_CPU_INCOMPATIBLE, errdefs.IsFailedPrecondition},
		{lv.ERR_NO_SUPPORT, errdefs.IsNotImplemented},
		{lv.ERR_OPERATION_UNSUPPORTED, errdefs.IsNotImplemented},
		{lv.ERR_NO_CONNECT, errdefs.IsUnavailable},
		{lv.ERR_OPERATION_TIMEOUT, errdefs.IsUnavailable},
		{lv.ERR_AGENT_UNRESPONSIVE, errdefs.IsUnavailable},
		{lv.ERR_ACCESS_DENIED, errdefs.IsPermissionDenied},
		{lv.ERR_NO_MEMORY, errdefs.IsResourceExhausted},
		{lv.ERR_OPERATION_ABORTED, errdefs.IsAborted},
		{lv.ERR_INTERNAL_ERROR, errdefs.IsInternal},
		{lv.ERR_OPERATION_FAILED, errdefs.IsInternal},
		{lv.ERR_SYSTEM_ERROR, errdefs.IsInternal},
		{lv.ERR_NO_XEN, errdefs.IsUnknown},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(int(tt.code)), func(t *testing.T) {
			le := lv.Error{Code: tt.code, Message: "boom"}
			err := classify(fmt.Errorf("wrapped: %w", le), `domain "x"`)
			if !tt.is(err) {
				t.Errorf("classify(code %d) = %v, wrong class", tt.code, err)
			}
			// Callers get the class, not libvirt's type.
			var got lv.Error
			if errors.As(err, &got) {
				t.Errorf("classify(code %d) leaks the libvirt error", tt.code)
			}
			if !strings.HasPrefix(err.Error(), `domain "x": `) || !strings.Contains(err.Error(), "boom") {
				t.Errorf("classify(code %d) = %q, want subject and libvirt's message", tt.code, err)
			}
		})
	}
	if classify(nil, "x") != nil {
		t.Error("classify(nil) != nil")
	}
	plain := errors.New("plain")
	if err := classify(plain, "x"); !errors.Is(err, plain) {
		t.Errorf("classify(non-libvirt) = %v, want it wrapped", err)
	}
}

func TestAgentError(t *testing.T) {
	tests := []struct {
		name string
		err  lv.Error
		is   func(error) bool
		says string
	}{
		{"not connected", lv.Error{Code: lv.ERR_AGENT_UNRESPONSIVE, Message: "Guest agent is not responding: QEMU guest agent is not connected"},
			errdefs.IsUnavailable, "the guest runs no QEMU guest agent"},
		{"timed out", lv.Error{Code: lv.ERR_AGENT_UNRESPONSIVE, Message: "Guest agent is not responding: Guest agent not available for now"},
			errdefs.IsUnavailable, "the guest runs no QEMU guest agent"},
		{"no channel", lv.Error{Code: lv.ERR_ARGUMENT_UNSUPPORTED, Message: "argument unsupported: QEMU guest agent is not configured"},
			errdefs.IsFailedPrecondition, "no guest agent channel"},
		{"refused", lv.Error{Code: lv.ERR_INTERNAL_ERROR, Message: "internal error: unable to execute QEMU agent command 'guest-exec': Guest agent command failed, error was 'Failed to execute child process \u201cnope\u201d (No such file or directory)'"},
			errdefs.IsInvalidArgument, "the agent refused the command: 'guest-exec': Guest agent command failed, error was 'Failed to execute child process"},
		{"other internal", lv.Error{Code: lv.ERR_INTERNAL_ERROR, Message: "something else"},
			errdefs.IsInternal, "something else"},
		{"test driver", lv.Error{Code: lv.ERR_NO_SUPPORT, Message: "this function is not supported by the connection driver: virDomainQemuAgentCommand"},
			errdefs.IsNotImplemented, "not supported"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := agentError(tt.err, "x")
			if !tt.is(err) || !strings.Contains(err.Error(), tt.says) || !strings.HasPrefix(err.Error(), `guest agent of domain "x": `) {
				t.Errorf("agentError = %v, want the class and %q", err, tt.says)
			}
		})
	}
}
