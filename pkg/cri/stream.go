package cri

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"k8s.io/cri-streaming/pkg/streaming"
)

// streamServer is the kubelet's CRI streaming server (k8s.io/cri-streaming,
// the package containerd's CRI plugin serves exec, attach and
// port-forward with) over streamRuntime: the Exec, Attach and PortForward
// RPCs hand out its one-use URLs, and it speaks SPDY and websockets to
// whoever opens them (the kubelet, which proxies them for the API
// server, or crictl).
//
// It listens on Config.StreamAddr before the CRI socket opens, so every
// URL names the port it really has (a configured port 0 is chosen once,
// at the start).
func (s *Server) startStreaming(ctx context.Context) (func(), error) {
	l, err := net.Listen("tcp", s.cfg.StreamAddr)
	if err != nil {
		return nil, errorf(errdefs.ErrInvalidArgument, "streaming server on %s: %v", s.cfg.StreamAddr, err)
	}
	cfg := streaming.DefaultConfig
	cfg.Addr = l.Addr().String()
	cfg.BaseURL = &url.URL{Scheme: "http", Host: cfg.Addr}
	st, err := streaming.NewServer(cfg, streamRuntime{s})
	if err != nil {
		l.Close()
		return nil, errorf(errdefs.ErrInternal, "streaming server: %v", err)
	}
	// A request's context ends when its connection closes (connContext):
	// a stream whose client went stops its guest work.
	hs := &http.Server{Handler: st, ReadHeaderTimeout: 30 * time.Second, ConnContext: connContext}
	go func() {
		if err := hs.Serve(closeNotifyListener{l}); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.G(ctx).WithError(err).Error("streaming server")
		}
	}()
	s.mu.Lock()
	s.stream = st
	s.mu.Unlock()
	log.G(ctx).Infof("CRI streaming (exec, attach, port-forward) on http://%s", cfg.Addr)
	return func() { hs.Close() }, nil
}

// streaming is the streaming server once Serve started it.
func (s *Server) streaming() (streaming.Server, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stream == nil {
		return nil, errorf(errdefs.ErrUnavailable, "the streaming server is not running")
	}
	return s.stream, nil
}
