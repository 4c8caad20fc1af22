package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	node "github.com/vmpod/vmpod/api/node/v1"
	"github.com/vmpod/vmpod/pkg/daemon"
	"github.com/vmpod/vmpod/pkg/vmd"
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
	return cfg, *socket, *metricsAddr, 0
}
