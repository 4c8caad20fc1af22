package cri

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-streaming/pkg/streaming"

	"github.com/vmpod/vmpod/internal/ckpt"
	"github.com/vmpod/vmpod/pkg/vmd"
)

// Server is the CRI runtime and image services of one node.
type Server struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	runtimeapi.UnimplementedImageServiceServer

	cfg    Config
	images *imageStore
	net    *cniNetwork

	mu         sync.Mutex
	sandboxes  map[string]*sandbox
	containers map[string]*container
	names      map[string]string // reserved sandbox and container names -> id
	stream     streaming.Server  // once Serve started it

	// imageMu orders RemoveImage with the containers being made:
	// imageHolds counts, by image ID, the CreateContainer calls that
	// hold an image (useImage) and are not yet in containers.
	imageMu    sync.Mutex
	imageHolds map[string]int

	// vms is the node's VMs: a container's VM is the one of its id.
	vms *vmd.Service
	// sessions counts the open execs, attaches and port-forwards.
	sessions *sessions
}

var (
	_ runtimeapi.RuntimeServiceServer = &Server{}
	_ runtimeapi.ImageServiceServer   = &Server{}
)

// New opens the server's state under cfg.StateRoot and recovers what an
// earlier server left (recover.go). The node's VM service opens libvirt
// only if a checkpoint names a domain; otherwise at the first VM.
func New(ctx context.Context, cfg Config) (*Server, error) {
	cfg = cfg.WithDefaults()
	// This server's image volumes (image_volume.go); containerd's mean
	// nothing on its node.
	cfg.Mounts.ImageVolumeRoots = []string{cfg.imageVolumeDir()}
	if p := cfg.DefaultCgroupParent; !path.IsAbs(p) || path.Clean(p) != p || p == "/" {
		return nil, errorf(errdefs.ErrInvalidArgument, "default cgroup parent %q: want a clean absolute cgroupfs path below the root", p)
	}
	for _, d := range []string{cfg.StateRoot, cfg.sandboxCkptDir(), cfg.containerCkptDir()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	images, err := openImageStore(ctx, cfg.imageDir(), cfg.imageLimits(), cfg.RegistryMirrors)
	if err != nil {
		return nil, err
	}
	vms, err := vmd.New(cfg.Config)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, images: images, net: newCNINetwork(cfg), vms: vms,
		sandboxes: map[string]*sandbox{}, containers: map[string]*container{}, names: map[string]string{},
		imageHolds: map[string]int{}, sessions: newSessions(cfg.MaxSessionsPerPod, cfg.MaxSessionsPerNode)}
	s.recover(ctx)
	return s, nil
}

// Register adds both services to g.
func (s *Server) Register(g *grpc.Server) {
	runtimeapi.RegisterRuntimeServiceServer(g, s)
	runtimeapi.RegisterImageServiceServer(g, s)
}

// Serve serves the CRI on a unix socket at addr ("unix:///run/vmpod/cri.sock"
// or a plain path), and exec, attach and port-forward streams on
// Config.StreamAddr, until ctx ends. Running VMs keep running when it
// returns.
func (s *Server) Serve(ctx context.Context, addr string) error {
	sock := strings.TrimPrefix(addr, "unix://")
	if !filepath.IsAbs(sock) {
		return errorf(errdefs.ErrInvalidArgument, "listen address %q: want unix:///absolute/path", addr)
	}
	if err := os.MkdirAll(filepath.Dir(sock), 0o755); err != nil {
		return err
	}
	if err := ckpt.RemoveFile(sock); err != nil {
		return err
	}
	stopStreaming, err := s.startStreaming(ctx)
	if err != nil {
		return err
	}
	defer stopStreaming()
	l, err := net.Listen("unix", sock)
	if err != nil {
		return err
	}
	g := grpc.NewServer(grpc.UnaryInterceptor(errorInterceptor))
	s.Register(g)
	go func() {
		<-ctx.Done()
		g.Stop()
	}()
	log.G(ctx).Infof("CRI listening on %s", sock)
	err = g.Serve(l)
	if errors.Is(err, grpc.ErrServerStopped) {
		err = nil
	}
	return err
}

// MetricsHandler serves the node's VM metrics (pkg/vmd).
func (s *Server) MetricsHandler() http.Handler { return s.vms.MetricsHandler() }

// Close closes the node's libvirt; QEMUs keep running.
func (s *Server) Close() error { return s.vms.Close() }
