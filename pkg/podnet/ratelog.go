package podnet

import (
	"context"
	"log/slog"
	"sort"
	"time"
)

// rateLog lets through at most one record of each kind per interval and
// counts the rest: a guest that sends a packet a microsecond must not write
// a log line a microsecond. The next record of a kind that gets through
// carries the count ("suppressed"), and flush logs the counts still held.
//
// Kinds are constants of the caller's, never taken from what the guest
// sends, so there are few. A rateLog is not safe for concurrent use: the
// DHCP server logs from its one goroutine and flushes after it ended.
type rateLog struct {
	log   *slog.Logger
	every time.Duration
	now   func() time.Time
	kinds map[string]*rateKind
}

type rateKind struct {
	last       time.Time
	suppressed int
	// The last suppressed record's level and message, for flush.
	level slog.Level
	msg   string
}

func newRateLog(log *slog.Logger, every time.Duration) *rateLog {
	return &rateLog{log: log, every: every, now: time.Now, kinds: map[string]*rateKind{}}
}

// Log logs msg with args at level unless a record of the same kind went out
// less than the interval ago.
func (r *rateLog) Log(level slog.Level, kind, msg string, args ...any) {
	now := r.now()
	k := r.kinds[kind]
	if k == nil {
		k = &rateKind{}
		r.kinds[kind] = k
	} else if now.Sub(k.last) < r.every {
		k.suppressed++
		k.level, k.msg = level, msg
		return
	}
	if k.suppressed > 0 {
		args = append(args, "suppressed", k.suppressed)
	}
	k.last, k.suppressed = now, 0
	r.log.Log(context.Background(), level, msg, args...)
}

// flush logs, for each kind with records held back, their number.
func (r *rateLog) flush() {
	kinds := make([]string, 0, len(r.kinds))
	for kind, k := range r.kinds {
		if k.suppressed > 0 {
			kinds = append(kinds, kind)
		}
	}
	sort.Strings(kinds)
	for _, kind := range kinds {
		k := r.kinds[kind]
		r.log.Log(context.Background(), k.level, k.msg, "suppressed", k.suppressed)
		k.suppressed = 0
	}
}
