package vm

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/containerd/errdefs"
)

// fakeGuest powers off at the press numbered off (1-based; 0: never),
// the earlier presses lost as a booting guest loses them.
type fakeGuest struct {
	off, presses int
	stopped      chan struct{}
	pressErr     error
}

func (g *fakeGuest) press(context.Context) error {
	g.presses++
	if g.pressErr != nil {
		return g.pressErr
	}
	if g.presses == g.off {
		close(g.stopped)
	}
	return nil
}

func (g *fakeGuest) wait(ctx context.Context) (Exit, error) {
	select {
	case <-g.stopped:
		return Exit{}, nil
	case <-ctx.Done():
		return Exit{}, ctx.Err()
	}
}

// TestShutdownWithin: the power button is pressed again within the grace
// until the guest powers off (a press made while it boots is lost); a
// guest that never does is reported after the grace; a VM not running
// and a failing press are reported at once.
func TestShutdownWithin(t *testing.T) {
	defer func(d time.Duration) { shutdownRepress = d }(shutdownRepress)
	shutdownRepress = 20 * time.Millisecond
	ctx := context.Background()

	g := &fakeGuest{off: 3, stopped: make(chan struct{})}
	if _, err := shutdownWithin(ctx, time.Minute, g.press, g.wait); err != nil || g.presses != 3 {
		t.Errorf("guest listening from the 3rd press: %v after %d presses, want stopped after 3", err, g.presses)
	}

	g = &fakeGuest{stopped: make(chan struct{})}
	start := time.Now()
	_, err := shutdownWithin(ctx, 200*time.Millisecond, g.press, g.wait)
	if !errors.Is(err, errGraceOver) || time.Since(start) < 200*time.Millisecond || g.presses < 5 {
		t.Errorf("guest that never stops: %v after %v and %d presses, want errGraceOver after the grace, pressed again", err, time.Since(start), g.presses)
	}

	g = &fakeGuest{stopped: make(chan struct{}), pressErr: fmt.Errorf("domain x: %w", errdefs.ErrFailedPrecondition)}
	if _, err := shutdownWithin(ctx, time.Minute, g.press, g.wait); !errors.Is(err, errNotRunning) || g.presses != 1 {
		t.Errorf("VM not running: %v after %d presses, want errNotRunning at once", err, g.presses)
	}

	g = &fakeGuest{stopped: make(chan struct{}), pressErr: errors.New("libvirt broke")}
	if _, err := shutdownWithin(ctx, time.Minute, g.press, g.wait); err == nil || errors.Is(err, errNotRunning) || errors.Is(err, errGraceOver) {
		t.Errorf("failing press: %v, want its error", err)
	}

	g = &fakeGuest{stopped: make(chan struct{})}
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := shutdownWithin(cctx, time.Minute, g.press, g.wait); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("caller gone: %v, want its context's error", err)
	}
}

// TestPressUntilStopped: after a first press, the button is pressed again
// every shutdownRepress until the guest powers off; a press that finds the
// VM gone is no error, a failing press ends it, and so does ctx.
func TestPressUntilStopped(t *testing.T) {
	defer func(d time.Duration) { shutdownRepress = d }(shutdownRepress)
	shutdownRepress = 20 * time.Millisecond
	ctx := context.Background()

	g := &fakeGuest{off: 3, stopped: make(chan struct{}), presses: 1} // the first press was Shutdown's
	if _, err := pressUntilStopped(ctx, g.press, g.wait); err != nil || g.presses != 3 {
		t.Errorf("guest listening from the 3rd press: %v after %d presses, want stopped after 3", err, g.presses)
	}

	g = &fakeGuest{stopped: make(chan struct{}), pressErr: fmt.Errorf("domain x: %w", errdefs.ErrNotFound)}
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := pressUntilStopped(cctx, g.press, g.wait); !errors.Is(err, context.DeadlineExceeded) || g.presses < 2 {
		t.Errorf("VM gone, its stop not yet seen: %v after %d presses, want pressing on (and waiting) until ctx ends", err, g.presses)
	}

	g = &fakeGuest{stopped: make(chan struct{}), pressErr: errors.New("libvirt broke")}
	if _, err := pressUntilStopped(ctx, g.press, g.wait); err == nil || g.presses != 1 {
		t.Errorf("failing press: %v after %d presses, want its error at once", err, g.presses)
	}
}
