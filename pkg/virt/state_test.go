package virt

import "testing"

func TestStringsHaveDefaults(t *testing.T) {
	for _, tt := range []struct{ got, want string }{
		{StateShuttingDown.String(), "shutting-down"},
		{State(42).String(), "State(42)"},
		{EventStopped.String(), "stopped"},
		{EventType(42).String(), "EventType(42)"},
		{StopGuestShutdown.String(), "guest-shutdown"},
		{StopReason(42).String(), "StopReason(42)"},
	} {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}

func TestActive(t *testing.T) {
	for s, want := range map[State]bool{
		StateUnknown: false, StateShutoff: false,
		StateRunning: true, StateCrashed: true, StatePaused: true, StateShuttingDown: true, StatePMSuspended: true,
	} {
		if s.Active() != want {
			t.Errorf("%v.Active() = %v, want %v", s, s.Active(), want)
		}
	}
}
