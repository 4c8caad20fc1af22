package libvirt

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/google/go-cmp/cmp"

	"github.com/vmpod/vmpod/pkg/virt"
)

func TestLifecycleOnTestDriver(t *testing.T) {
	ctx := context.Background()
	c := openTest(t)
	name := domainName(t)
	rec := recordEvents(c)

	wantInfo := func(step string, want virt.Info) {
		t.Helper()
		got, err := c.Info(ctx, name)
		if err != nil {
			t.Fatalf("%s: Info: %v", step, err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: Info (-want +got):\n%s", step, diff)
		}
	}
	must := func(step string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	}

	must("Define", c.Define(ctx, domainXML(t, "test", name, "")))
	t.Cleanup(func() {
		_ = c.Destroy(ctx, name)
		_ = c.Undefine(ctx, name)
	})
	wantInfo("defined", virt.Info{State: virt.StateShutoff, Reason: virt.StopUnknown})

	must("Start", c.Start(ctx, name, virt.StartOptions{}))
	wantInfo("started", virt.Info{State: virt.StateRunning})
	must("Suspend", c.Suspend(ctx, name))
	wantInfo("suspended", virt.Info{State: virt.StatePaused})
	must("Resume", c.Resume(ctx, name))
	wantInfo("resumed", virt.Info{State: virt.StateRunning})

	st, err := c.Stats(ctx, name)
	must("Stats", err)
	// The test driver makes its numbers up; QEMU's are checked in
	// TestEmbedded.
	if st.CPUTime <= 0 || st.MemoryActual != 64<<20 {
		t.Errorf("Stats = %+v, want CPU time > 0 and 64 MiB actual", st)
	}
	must("SetMemoryHardLimit", c.SetMemoryHardLimit(ctx, name, 256<<20))

	must("Shutdown", c.Shutdown(ctx, name))
	wantInfo("shut down", virt.Info{State: virt.StateShutoff, Reason: virt.StopGuestShutdown})

	must("Start paused", c.Start(ctx, name, virt.StartOptions{Paused: true}))
	wantInfo("started paused", virt.Info{State: virt.StatePaused})
	must("Destroy", c.Destroy(ctx, name))
	wantInfo("destroyed", virt.Info{State: virt.StateShutoff, Reason: virt.StopDestroyed})
	must("Destroy again", c.Destroy(ctx, name))

	must("Undefine", c.Undefine(ctx, name))
	if _, err := c.Info(ctx, name); !errdefs.IsNotFound(err) {
		t.Errorf("Info after Undefine: err = %v, want NotFound", err)
	}

	want := []virt.Event{
		{Domain: name, Type: virt.EventDefined},
		{Domain: name, Type: virt.EventStarted},
		{Domain: name, Type: virt.EventSuspended},
		{Domain: name, Type: virt.EventResumed},
		{Domain: name, Type: virt.EventStopped, Reason: virt.StopGuestShutdown},
		{Domain: name, Type: virt.EventStarted},
		{Domain: name, Type: virt.EventSuspended},
		{Domain: name, Type: virt.EventStopped, Reason: virt.StopDestroyed},
		{Domain: name, Type: virt.EventUndefined},
	}
	got := rec.waitForCount(t, name, len(want), 10*time.Second)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

func TestErrorClasses(t *testing.T) {
	const ping = `{"execute":"guest-ping"}`
	ctx := context.Background()
	c := openTest(t)
	name := domainName(t)
	if err := c.Define(ctx, domainXML(t, "test", name, "")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Undefine(ctx, name) })

	tests := []struct {
		name string
		call func() error
		is   func(error) bool
	}{
		{"Start missing", func() error { return c.Start(ctx, "no-such-domain", virt.StartOptions{}) }, errdefs.IsNotFound},
		{"Destroy missing", func() error { return c.Destroy(ctx, "no-such-domain") }, errdefs.IsNotFound},
		{"Undefine missing", func() error { return c.Undefine(ctx, "no-such-domain") }, errdefs.IsNotFound},
		{"Info missing", func() error { _, err := c.Info(ctx, "no-such-domain"); return err }, errdefs.IsNotFound},
		{"Define existing", func() error { return c.Define(ctx, domainXML(t, "test", name, "")) }, errdefs.IsAlreadyExists},
		{"Define the built-in domain", func() error { return c.Define(ctx, domainXML(t, "test", "test", "")) }, errdefs.IsAlreadyExists},
		{"Define malformed XML", func() error { return c.Define(ctx, "<domain type='test'><name>x</name>") }, errdefs.IsInvalidArgument},
		{"Define unknown element", func() error {
			return c.Define(ctx, "<domain type='test'><name>x</name><memory>1024</memory><os><type>hvm</type></os><bogus/></domain>")
		}, errdefs.IsInvalidArgument},
		{"Define without name", func() error {
			return c.Define(ctx, "<domain type='test'><memory>1024</memory><os><type>hvm</type></os></domain>")
		}, errdefs.IsInvalidArgument},
		{"Suspend stopped", func() error { return c.Suspend(ctx, name) }, errdefs.IsFailedPrecondition},
		{"Resume stopped", func() error { return c.Resume(ctx, name) }, errdefs.IsFailedPrecondition},
		{"Shutdown stopped", func() error { return c.Shutdown(ctx, name) }, errdefs.IsFailedPrecondition},
		{"Stats stopped", func() error { _, err := c.Stats(ctx, name); return err }, errdefs.IsFailedPrecondition},
		{"zero hard limit", func() error { return c.SetMemoryHardLimit(ctx, name, 0) }, errdefs.IsInvalidArgument},
		{"hard limit on stopped", func() error { return c.SetMemoryHardLimit(ctx, name, 1<<30) }, errdefs.IsFailedPrecondition},
		{"Start running", func() error { return c.Start(ctx, "test", virt.StartOptions{}) }, errdefs.IsFailedPrecondition},
		{"AgentCommand missing", func() error { _, err := c.AgentCommand(ctx, "no-such-domain", ping, time.Second); return err }, errdefs.IsNotFound},
		{"AgentCommand stopped", func() error { _, err := c.AgentCommand(ctx, name, ping, time.Second); return err }, errdefs.IsFailedPrecondition},
		// The test driver has no guest agents.
		{"AgentCommand on the test driver", func() error { _, err := c.AgentCommand(ctx, "test", ping, time.Second); return err }, errdefs.IsNotImplemented},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if !tt.is(err) {
				t.Errorf("err = %v, wrong class", err)
			}
		})
	}
}

func TestSuspendResumeAreIdempotent(t *testing.T) {
	ctx := context.Background()
	c := openTest(t)
	name := domainName(t)
	if err := c.Define(ctx, domainXML(t, "test", name, "")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Destroy(ctx, name)
		_ = c.Undefine(ctx, name)
	})
	for _, step := range []struct {
		name string
		call func() error
	}{
		{"Start", func() error { return c.Start(ctx, name, virt.StartOptions{}) }},
		{"Resume running", func() error { return c.Resume(ctx, name) }},
		{"Suspend", func() error { return c.Suspend(ctx, name) }},
		{"Suspend paused", func() error { return c.Suspend(ctx, name) }},
	} {
		if err := step.call(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
	}
}

func TestCanceledContext(t *testing.T) {
	c := openTest(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Info(ctx, "test"); !errdefs.IsCanceled(err) {
		t.Errorf("Info with canceled ctx: err = %v, want Canceled", err)
	}
}

func TestCapabilitiesOnTestDriver(t *testing.T) {
	c := openTest(t)
	// The test driver has host capabilities but no domain capabilities.
	_, _, err := c.Capabilities(context.Background(), "")
	if !errdefs.IsNotImplemented(err) {
		t.Errorf("Capabilities: err = %v, want NotImplemented", err)
	}
}

// TestTestDriverStateIsShared pins down a libvirt 9 behaviour the tests
// depend on: test:///default is one state per process, not per connection.
func TestTestDriverStateIsShared(t *testing.T) {
	ctx := context.Background()
	a, b := openTest(t), openTest(t)
	name := domainName(t)
	if err := a.Define(ctx, domainXML(t, "test", name, "")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Undefine(ctx, name) })
	names, err := b.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(names, name) || !slices.Contains(names, "test") {
		t.Errorf("List on second connection = %v, want %q and the built-in \"test\"", names, name)
	}
}

func TestEventsClosedByClose(t *testing.T) {
	c, err := OpenTest(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case _, ok := <-c.Events():
		if ok {
			t.Error("got an event after Close, want a closed channel")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Events not closed by Close")
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}
