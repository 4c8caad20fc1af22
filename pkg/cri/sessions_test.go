package cri

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
)

// TestSessions: each kind is bounded per pod and per node, apart from
// the others; a release (once or twice) frees one place; a refusal is
// ResourceExhausted naming the flag.
func TestSessions(t *testing.T) {
	s := newSessions(2, 3)
	open := func(kind sessionKind, pod string) func() {
		t.Helper()
		release, err := s.open(kind, pod)
		if err != nil {
			t.Fatalf("%s in %s: %v", kind, pod, err)
		}
		return release
	}
	refused := func(kind sessionKind, pod, flag string) {
		t.Helper()
		if _, err := s.open(kind, pod); !errdefs.IsResourceExhausted(err) || !strings.Contains(err.Error(), flag) {
			t.Errorf("%s in %s past a bound: %v, want ResourceExhausted naming %s", kind, pod, err, flag)
		}
	}
	a1 := open(sessionExec, "a")
	open(sessionExec, "a")
	refused(sessionExec, "a", "--max-sessions-per-pod")
	open(sessionAttach, "a") // another kind: its own count
	open(sessionExec, "b")
	refused(sessionExec, "c", "--max-sessions-per-node")
	a1()
	a1() // a second release frees nothing more
	if got := s.count(sessionExec, "a"); got != 1 {
		t.Errorf("after a release: %d execs in a, want 1", got)
	}
	open(sessionExec, "c")
	refused(sessionExec, "a", "--max-sessions-per-node")
	if got := s.count(sessionExec, ""); got != 3 {
		t.Errorf("%d execs on the node, want 3", got)
	}
}

// TestConnContext: a request's context on the streaming server ends when
// its connection is closed, as the streaming code closes a hijacked
// connection whose client went; the request's own context does not.
func TestConnContext(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ended := make(chan error, 1)
	hs := &http.Server{ConnContext: connContext, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			ended <- err
			return
		}
		rw.WriteString("HTTP/1.1 101 Switching Protocols\r\n\r\n")
		rw.Flush()
		// As SPDY's reader does: the connection is closed at its
		// client's end.
		go func() {
			buf := make([]byte, 1)
			for {
				if _, err := conn.Read(buf); err != nil {
					conn.Close()
					return
				}
			}
		}()
		select {
		case <-r.Context().Done():
			ended <- nil
		case <-time.After(20 * time.Second):
			ended <- context.DeadlineExceeded
		}
	})}
	go hs.Serve(closeNotifyListener{l})
	defer hs.Close()

	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\n"))
	if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || !strings.Contains(line, "101") {
		t.Fatalf("upgrade: %q, %v", line, err)
	}
	c.Close() // the client goes
	if err := <-ended; err != nil {
		t.Errorf("the request's context after its client went: %v, want it ended", err)
	}
}

// count is the open sessions of kind in pod ("": the node's).
func (s *sessions) count(kind sessionKind, pod string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if pod == "" {
		return s.node[kind]
	}
	return s.pods[sessionKey{kind, pod}]
}
