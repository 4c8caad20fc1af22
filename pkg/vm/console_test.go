package vm_test

import (
	"context"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vmpod/vmpod/pkg/vm"
)

type countingWriter struct{ n atomic.Int64 }

func (c *countingWriter) Write(p []byte) (int, error) {
	c.n.Add(int64(len(p)))
	return len(p), nil
}

// TestConsoleFlood: a guest that floods its console (1 MiB) leaves at most
// two log files of the cap on the node, while the runtime's writer (the
// container's stdout) gets all of it.
func TestConsoleFlood(t *testing.T) {
	const logCap = 128 << 10
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	out := &countingWriter{}
	g := startGuest(ctx, t, "flood-console-pod.yaml", func(c *vm.Config) {
		c.MemoryLimit, c.ConsoleOut, c.ConsoleLogBytes = 0, out, logCap
	})
	g.console.waitFor(ctx, t, "VMPOD-GUEST: flood-console done")
	elapsed := time.Since(g.started)
	layout := g.layout
	var total int64
	for _, f := range []string{layout.ConsoleLog(), layout.ConsoleLog() + ".1"} {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatalf("%v (the log should have rotated)", err)
		}
		if fi.Size() > logCap {
			t.Errorf("%s is %d bytes, past the cap of %d", f, fi.Size(), logCap)
		}
		total += fi.Size()
	}
	if n := out.n.Load(); n < 1<<20 {
		t.Errorf("the console's writer got %d bytes, want the whole 1 MiB flood", n)
	}
	t.Logf("%d bytes through the console in %v; %d bytes of log on the node", out.n.Load(), elapsed.Round(time.Millisecond), total)
}
