package remote

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestAgentSocketLink: a direct agent call (no helper running) does not
// follow a link where the agent's socket should be: a compromised QEMU
// that owned the socket's dir (a VM started by an earlier version) could
// otherwise point the runtime (root) at any socket on the node.
func TestAgentSocketLink(t *testing.T) {
	dir := t.TempDir()
	other := filepath.Join(dir, "other.sock")
	l, err := net.Listen("unix", other)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	connected := make(chan struct{})
	go func() {
		if c, err := l.Accept(); err == nil {
			c.Close()
			close(connected)
		}
	}()
	link := filepath.Join(dir, "qga.sock")
	if err := os.Symlink(other, link); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = agentCommand(ctx, link, "vm", `{"execute":"guest-ping"}`, time.Second)
	if err == nil || !strings.Contains(err.Error(), "is not a socket") {
		t.Errorf("agent call through a link: %v, want a refusal", err)
	}
	select {
	case <-connected:
		t.Errorf("the call connected to %s, which the link named", other)
	case <-time.After(100 * time.Millisecond):
	}
}
