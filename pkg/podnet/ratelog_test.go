package podnet

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// recordLog keeps each record as "LEVEL msg k=v ...".
type recordLog struct{ lines []string }

func (r *recordLog) Enabled(context.Context, slog.Level) bool { return true }
func (r *recordLog) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *recordLog) WithGroup(string) slog.Handler            { return r }
func (r *recordLog) Handle(_ context.Context, rec slog.Record) error {
	line := rec.Level.String() + " " + rec.Message
	rec.Attrs(func(a slog.Attr) bool {
		line += fmt.Sprintf(" %s=%v", a.Key, a.Value)
		return true
	})
	r.lines = append(r.lines, line)
	return nil
}

func TestRateLog(t *testing.T) {
	var out recordLog
	now := time.Unix(1000, 0)
	r := newRateLog(slog.New(&out), 30*time.Second)
	r.now = func() time.Time { return now }
	at := func(d time.Duration) { now = time.Unix(1000, 0).Add(d) }

	r.Log(slog.LevelWarn, "decline", "declined", "n", 1)
	at(time.Second)
	r.Log(slog.LevelWarn, "decline", "declined", "n", 2)
	r.Log(slog.LevelDebug, "ignored", "ignored", "n", 3) // another kind: its own budget
	at(29 * time.Second)
	r.Log(slog.LevelWarn, "decline", "declined", "n", 4)
	r.Log(slog.LevelDebug, "ignored", "ignored", "n", 5)
	at(30 * time.Second)
	r.Log(slog.LevelWarn, "decline", "declined", "n", 6) // 30 s after the first: out, with the count
	r.Log(slog.LevelWarn, "decline", "declined", "n", 7)
	r.flush()
	r.flush() // nothing left to report

	want := []string{
		"WARN declined n=1",
		"DEBUG ignored n=3",
		"WARN declined n=6 suppressed=2",
		"WARN declined suppressed=1",
		"DEBUG ignored suppressed=1",
	}
	if diff := cmp.Diff(want, out.lines); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
}
