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
