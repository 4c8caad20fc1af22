package remote

import (
	"context"
	"time"

	"github.com/containerd/errdefs"

	"github.com/vmpod/vmpod/pkg/virt"
)

// service is the JSON-RPC service name.
const service = "Hypervisor."

// Request is every call's argument (exported only because net/rpc wants
// it): the caller's deadline travels with the
// call, since a context cannot.
type Request struct {
	Deadline time.Time `json:",omitempty"`
	Name     string    `json:",omitempty"` // the domain
	VirtType string    `json:",omitempty"`
	XML      string    `json:",omitempty"`
	Paused   bool      `json:",omitempty"`
	Bytes    uint64    `json:",omitempty"`
	Command  string    `json:",omitempty"`
	Timeout  time.Duration
	Wait     bool `json:",omitempty"` // Events: block until there is one
}

func (r *Request) context() (context.Context, context.CancelFunc) {
	if r.Deadline.IsZero() {
		return context.WithCancel(context.Background())
	}
	return context.WithDeadline(context.Background(), r.Deadline)
}

// Reply is every call's answer.
type Reply struct {
	Err     *wireError   `json:",omitempty"`
	Caps    string       `json:",omitempty"`
	DomCaps string       `json:",omitempty"`
	Info    virt.Info    `json:",omitempty"`
	Stats   virt.Stats   `json:",omitempty"`
	Text    string       `json:",omitempty"` // AgentCommand's reply, Sockets' monitor
	Agent   string       `json:",omitempty"` // Sockets' guest agent channel
	Log     string       `json:",omitempty"` // Sockets' domain log
	Names   []string     `json:",omitempty"`
	Events  []virt.Event `json:",omitempty"`
	Closed  bool         `json:",omitempty"` // Events: there will be no more
}

// wireError is an error with its errdefs class, which callers branch on.
type wireError struct {
	Class string
	Msg   string
}

// classes are the errdefs classes that cross the wire, most specific
// first; anything else arrives as Unknown.
var classes = []struct {
	name string
	is   func(error) bool
	err  error
}{
	{"NotFound", errdefs.IsNotFound, errdefs.ErrNotFound},
	{"AlreadyExists", errdefs.IsAlreadyExists, errdefs.ErrAlreadyExists},
	{"InvalidArgument", errdefs.IsInvalidArgument, errdefs.ErrInvalidArgument},
	{"FailedPrecondition", errdefs.IsFailedPrecondition, errdefs.ErrFailedPrecondition},
	{"Unavailable", errdefs.IsUnavailable, errdefs.ErrUnavailable},
	{"NotImplemented", errdefs.IsNotImplemented, errdefs.ErrNotImplemented},
	{"ResourceExhausted", errdefs.IsResourceExhausted, errdefs.ErrResourceExhausted},
	{"PermissionDenied", errdefs.IsPermissionDenied, errdefs.ErrPermissionDenied},
	{"Aborted", errdefs.IsAborted, errdefs.ErrAborted},
	{"Canceled", errdefs.IsCanceled, context.Canceled},
	{"DeadlineExceeded", errdefs.IsDeadlineExceeded, context.DeadlineExceeded},
	{"Internal", errdefs.IsInternal, errdefs.ErrInternal},
}

func toWire(err error) *wireError {
	if err == nil {
		return nil
	}
	for _, c := range classes {
		if c.is(err) {
			return &wireError{Class: c.name, Msg: err.Error()}
		}
	}
	return &wireError{Class: "Unknown", Msg: err.Error()}
}

func (w *wireError) error() error {
	if w == nil {
		return nil
	}
	var class error = errdefs.ErrUnknown
	for _, c := range classes {
		if c.name == w.Class {
			class = c.err
		}
	}
	return &classified{msg: w.Msg, class: class}
}

// classified is an error from the other side: its message as it was, its
// class for errors.Is.
type classified struct {
	msg   string
	class error
}

func (e *classified) Error() string { return e.msg }
func (e *classified) Unwrap() error { return e.class }
