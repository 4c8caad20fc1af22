package cri

import (
	"context"
	"net"
	"sync"

	"github.com/containerd/errdefs"
)

// A session is one exec (streamed or ExecSync), attach or port-forward
// connection. Each kind is bounded per pod and per node: every one holds
// guest or server work (a guest agent command, a console reader, a TCP
// connection into the guest) for as long as a client keeps it open.
type sessionKind string

const (
	sessionExec        sessionKind = "exec"
	sessionAttach      sessionKind = "attach"
	sessionPortForward sessionKind = "port-forward"
)

// Default bounds on sessions of each kind (Config.MaxSessionsPerPod,
// MaxSessionsPerNode): far above a kubelet's own use (one probe exec per
// container at a time, one attach per kubectl) and a browser's through
// kubectl port-forward (a connection each, about 6 at once), well below
// what one guest agent or the server's descriptors could carry.
const (
	DefaultMaxSessionsPerPod  = 32
	DefaultMaxSessionsPerNode = 512
)

// sessions counts the open sessions by kind, node-wide and per pod.
type sessions struct {
	perPod, perNode int
	mu              sync.Mutex
	node            map[sessionKind]int
	pods            map[sessionKey]int
}

type sessionKey struct {
	kind sessionKind
	pod  string
}

func newSessions(perPod, perNode int) *sessions {
	return &sessions{perPod: perPod, perNode: perNode, node: map[sessionKind]int{}, pods: map[sessionKey]int{}}
}

// open counts a session of kind in pod, or fails with ResourceExhausted
// naming the bound and its flag. release ends it; it may be called more
// than once.
func (s *sessions) open(kind sessionKind, pod string) (release func(), err error) {
	k := sessionKey{kind, pod}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.pods[k] >= s.perPod:
		return nil, errorf(errdefs.ErrResourceExhausted, "pod %s has %d %s sessions open, the most a pod may have (--max-sessions-per-pod); close one and retry",
			pod, s.pods[k], kind)
	case s.node[kind] >= s.perNode:
		return nil, errorf(errdefs.ErrResourceExhausted, "the node has %d %s sessions open, the most it may have (--max-sessions-per-node); close one and retry",
			s.node[kind], kind)
	}
	s.pods[k]++
	s.node[kind]++
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.pods[k]--; s.pods[k] == 0 {
				delete(s.pods, k)
			}
			s.node[kind]--
		})
	}, nil
}

// closeNotifyListener gives each connection it accepts a context that
// ends when the connection is closed. The streaming server's SPDY and
// websocket code close a connection when its client goes, but the
// request's own context does not end then (the connection is hijacked),
// so a gone client's exec would run on in the guest; with this context
// as the requests' base (http.Server.ConnContext) it ends.
type closeNotifyListener struct{ net.Listener }

func (l closeNotifyListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &notifyConn{Conn: c, ctx: ctx, cancel: cancel}, nil
}

type notifyConn struct {
	net.Conn
	ctx    context.Context
	cancel context.CancelFunc
}

func (c *notifyConn) Close() error {
	c.cancel()
	return c.Conn.Close()
}

// connContext is the base context of a request on c: c's, which ends
// when c is closed.
func connContext(ctx context.Context, c net.Conn) context.Context {
	nc, ok := c.(*notifyConn)
	if !ok {
		return ctx
	}
	merged, cancel := context.WithCancel(ctx)
	context.AfterFunc(nc.ctx, cancel)
	return merged
}
