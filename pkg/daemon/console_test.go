package daemon

import (
	"bytes"
	"testing"

	node "github.com/vmpod/vmpod/api/node/v1"
	"github.com/vmpod/vmpod/pkg/vm"
)

// TestConsoleBacklog: a reader gets what follows its offset in chunks of
// at most consoleChunk, from the oldest byte held when its offset is no
// longer held (skipped), nothing and a wake-up channel when it is
// current, and the end once the console is closed and drained.
func TestConsoleBacklog(t *testing.T) {
	c := newConsole()
	data, end, skipped, done, more := c.next(0)
	if len(data) != 0 || end != 0 || skipped || done {
		t.Fatalf("an empty console: %q %d %v %v", data, end, skipped, done)
	}
	c.Write([]byte("hello "))
	select {
	case <-more:
	default:
		t.Fatal("a write did not wake the reader")
	}
	c.Write([]byte("world"))
	if data, end, skipped, _, _ = c.next(0); string(data) != "hello world" || end != 11 || skipped {
		t.Fatalf("from 0: %q up to %d, skipped %v", data, end, skipped)
	}
	if data, end, _, _, _ = c.next(6); string(data) != "world" || end != 11 {
		t.Fatalf("from 6: %q up to %d", data, end)
	}

	// Past the backlog: the oldest bytes go, a reader behind them is
	// told, and a chunk is at most consoleChunk.
	big := bytes.Repeat([]byte("x"), consoleBacklog)
	c.Write(big)
	total := uint64(11 + consoleBacklog)
	data, end, skipped, _, _ = c.next(0)
	if !skipped || len(data) != consoleChunk || end != total-consoleBacklog+consoleChunk {
		t.Fatalf("a reader behind the backlog: %d bytes up to %d, skipped %v", len(data), end, skipped)
	}
	for off := end; off < total; {
		data, off, skipped, _, _ = c.next(off)
		if skipped || len(data) == 0 {
			t.Fatalf("reading on at %d: %d bytes, skipped %v", off, len(data), skipped)
		}
	}
	c.close()
	if data, _, _, done, _ = c.next(total); len(data) != 0 || !done {
		t.Fatalf("a closed, drained console: %d bytes, done %v", len(data), done)
	}
	if data, _, _, done, _ = c.next(total - 3); string(data) != "xxx" || done {
		t.Fatalf("a closed console with bytes left: %q, done %v", data, done)
	}
}

// TestExecStdinLimit: the API's stdin limit, which the shim reads up to,
// is what the guest agent takes (vm.MaxExecInput).
func TestExecStdinLimit(t *testing.T) {
	if node.MaxExecStdin != vm.MaxExecInput {
		t.Errorf("node.MaxExecStdin = %d, vm.MaxExecInput = %d: they must be one limit", node.MaxExecStdin, vm.MaxExecInput)
	}
}
