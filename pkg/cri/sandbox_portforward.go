package cri

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"github.com/containerd/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// PortForward hands out the streaming URL that forwards to ports of the
// pod (kubectl port-forward).
func (s *Server) PortForward(ctx context.Context, r *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error) {
	sb, err := s.sandbox(r.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	if _, err := podIP(sb.Get()); err != nil {
		return nil, err
	}
	for _, p := range r.GetPort() {
		if p <= 0 || p > 65535 {
			return nil, errorf(errdefs.ErrInvalidArgument, "port %d", p)
		}
	}
	st, err := s.streaming()
	if err != nil {
		return nil, err
	}
	r.PodSandboxId = sb.Get().ID
	return st.GetPortForward(r)
}

// PortForward connects the stream to the port on the pod IP, from the
// server's own network namespace, the node's: that is where the guest
// is reached. Inside the pod's network namespace the pod IP is the pod
// interface's own address (podnet hands the interface's traffic to the
// guest with tc, at the link layer), so a connection made there, to the
// pod IP or to localhost, stays in that namespace's stack and never
// reaches the guest. The node reaches pod IPs as the kubelet's HTTP and
// TCP probes do.
func (rt streamRuntime) PortForward(ctx context.Context, sandboxID string, port int32, stream io.ReadWriteCloser) error {
	sb, err := rt.s.sandbox(sandboxID)
	if err != nil {
		return err
	}
	ip, err := podIP(sb.Get())
	if err != nil {
		return err
	}
	release, err := rt.s.sessions.open(sessionPortForward, sb.Get().ID)
	if err != nil {
		return err
	}
	defer release()
	d := net.Dialer{Timeout: portForwardDialTimeout}
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(ip, strconv.Itoa(int(port))))
	if err != nil {
		return errorf(errdefs.ErrUnavailable, "port-forward to %s port %d: %v", sandboxID, port, err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()

	// Each direction ends at its source's end and passes the end on; the
	// forward is over when the guest's side is. The client's side ends
	// with its stream, which the streaming server closes when this
	// returns or the client goes.
	go func() {
		io.Copy(conn, stream) //nolint:errcheck // the other direction reports
		if tc, ok := conn.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
	}()
	_, err = io.Copy(stream, conn)
	if err != nil {
		return fmt.Errorf("port-forward from %s port %d: %w", sandboxID, port, err)
	}
	return nil
}

// portForwardDialTimeout bounds the connection to the guest: a closed port
// is refused at once, a guest that does not answer (still booting, or
// dropping the port) costs the client this long and no more. The shim's
// forwarder (pkg/portfwd) waits as long.
const portForwardDialTimeout = 10 * time.Second

// podIP is the sandbox's first pod IP, while it is ready.
func podIP(rec sandboxRecord) (string, error) {
	if rec.State != sandboxReady || len(rec.IPs) == 0 {
		return "", errorf(errdefs.ErrFailedPrecondition, "sandbox %s is not ready or has no pod IP", rec.ID)
	}
	return rec.IPs[0], nil
}
