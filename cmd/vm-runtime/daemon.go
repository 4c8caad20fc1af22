package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	node "github.com/vmpod/vmpod/api/node/v1"
	"github.com/vmpod/vmpod/pkg/daemon"
	"github.com/vmpod/vmpod/pkg/vmd"
	"github.com/vmpod/vmpod/pkg/vmspec"
)

func daemonCmd(args []string) int {
	cfg, socket, metricsAddr, code := daemonFlags(args)
	if code != 0 {
		return code
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	vms, err := vmd.New(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "daemon:", err)
		return 1
	}
	defer vms.Close()
	if err := serveMetrics(ctx, metricsAddr, vms.MetricsHandler()); err != nil {
		fmt.Fprintln(os.Stderr, "daemon:", err)
		return 1
	}
	s := daemon.New(vms)
	s.Recover(ctx)
	if err := s.Serve(ctx, socket); err != nil {
		fmt.Fprintln(os.Stderr, "daemon:", err)
		return 1
	}
	return 0
}

// daemonFlags parses daemon's flags into the node's VM config, the socket
// to serve and the metrics address ("": none); a non-zero code is the
// exit code of a bad command line.
func daemonFlags(args []string) (vmd.Config, string, string, int) {
	fs := flag.NewFlagSet("daemon", flag.ContinueOnError)
	socket := fs.String("socket", node.DefaultSocket, "the node API's unix socket (root only), which the containerd shims dial")
	vf := addVMFlags(fs, "pods' dirs, libvirt's root and checkpoints (on disk: VM disk overlays live there)")
	metricsAddr := fs.String("metrics-address", "", "host:port to serve Prometheus metrics of the node's VMs at /metrics (docs/metrics.md); none by default")
	containerdState := fs.String("containerd-state-dir", vmspec.DefaultContainerdStateDir,
		"containerd's state dir (the `state` of its config) as mount sources name it (containerd resolves symlinks in them): "+
			"the image volumes its CRI mounts below it, <dir>/io.containerd.grpc.v1.cri/image-volumes/<sandbox id>/, are shared read-only with their pod's guest")
	if err := fs.Parse(args); err != nil {
		return vmd.Config{}, "", "", 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "daemon: unexpected arguments:", fs.Args())
		return vmd.Config{}, "", "", 2
	}
	cfg, ok := vf.config("daemon")
	if !ok {
		return vmd.Config{}, "", "", 2
	}
	roots, err := containerdImageVolumes(*containerdState)
	if err != nil {
		fmt.Fprintf(os.Stderr, "daemon: %v\n", err)
		return vmd.Config{}, "", "", 2
	}
	cfg.Mounts.ImageVolumeRoots = roots
	return cfg, *socket, *metricsAddr, 0
}

// containerdImageVolumes are the image volume dirs (vmspec.MountRules)
// of containerd with state dir --containerd-state-dir, or an error
// naming the flag and its value.
func containerdImageVolumes(stateDir string) ([]string, error) {
	roots := []string{vmspec.ContainerdImageVolumes(stateDir)}
	if err := (vmspec.MountRules{ImageVolumeRoots: roots}).Validate(); err != nil || !filepath.IsAbs(stateDir) || filepath.Clean(stateDir) != stateDir {
		return nil, fmt.Errorf("--containerd-state-dir %q: want a clean absolute path", stateDir)
	}
	return roots, nil
}
