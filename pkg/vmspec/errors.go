package vmspec

import (
	"fmt"
	"strings"

	"github.com/containerd/errdefs"
)

// FieldError is a problem with one thing the user wrote: an annotation or a
// field of the pod. It always names that thing, and the accepted values when
// there is a fixed set. It is an invalid-argument error (errdefs.IsInvalidArgument).
type FieldError struct {
	// Field is the annotation key (vmpod.io/firmware) or the pod field path
	// (spec.containers[0].resources.limits.memory).
	Field string
	// Value is what the user wrote; empty when the field is missing.
	Value string
	// Accepted lists the accepted values, when there is a fixed set.
	Accepted []string
	// Detail says what is wrong when Accepted does not.
	Detail string
}

func (e *FieldError) Error() string {
	var b strings.Builder
	b.WriteString(e.Field)
	b.WriteString(": ")
	switch {
	case len(e.Accepted) > 0:
		fmt.Fprintf(&b, "%q is not one of %s", e.Value, strings.Join(e.Accepted, ", "))
		if e.Detail != "" {
			b.WriteString(" (" + e.Detail + ")")
		}
	case e.Value != "":
		fmt.Fprintf(&b, "%q: %s", truncate(e.Value, 64), e.Detail)
	default:
		b.WriteString(e.Detail)
	}
	return b.String()
}

// Unwrap classifies every FieldError as invalid argument, so that the edges
// (ttrpc, gRPC) map it to InvalidArgument without matching strings.
func (e *FieldError) Unwrap() error { return errdefs.ErrInvalidArgument }

func notOneOf(field, value string, accepted ...string) *FieldError {
	return &FieldError{Field: field, Value: value, Accepted: accepted}
}

func invalid(field, value, detail string) *FieldError {
	return &FieldError{Field: field, Value: value, Detail: detail}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
