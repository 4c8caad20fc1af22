package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/vmpod/vmpod/pkg/daemon"
	"github.com/vmpod/vmpod/pkg/jail"
	"github.com/vmpod/vmpod/pkg/node"
	"github.com/vmpod/vmpod/pkg/vmd"
)

// DefaultNodeAPISocket is where vm-runtime daemon serves the node API.
const DefaultNodeAPISocket = "/run/vmpod/vmd.sock"

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
	socket := fs.String("socket", DefaultNodeAPISocket, "the node API's unix socket (root only), which the containerd shims dial")
	stateRoot := fs.String("state-root", "/var/lib/vmpod", "pods' dirs, libvirt's root and checkpoints (on disk: VM disk overlays live there)")
	capsCache := fs.String("capabilities-cache", DefaultCapsCache, "node-wide warm copy of libvirt's QEMU capabilities")
	kvmCache := fs.String("kvm-cache", node.DefaultKVMCache, "node-wide KVM probe verdict")
	uids := fs.String("qemu-uids", "", "FIRST:COUNT uids for QEMU processes, one per pod (default: the jail's range)")
	diskCap := fs.String("disk-cap", "20Gi", "the most a VM's disk overlay may grow to")
	metricsAddr := fs.String("metrics-address", "", "host:port to serve Prometheus metrics of the node's VMs at /metrics (docs/metrics.md); none by default")
	if err := fs.Parse(args); err != nil {
		return vmd.Config{}, "", "", 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "daemon: unexpected arguments:", fs.Args())
		return vmd.Config{}, "", "", 2
	}
	cfg := vmd.Config{StateRoot: *stateRoot, CapsCache: *capsCache, KVMCache: *kvmCache}
	if *uids != "" {
		r, err := jail.ParseRange(*uids)
		if err != nil {
			fmt.Fprintln(os.Stderr, "daemon: --qemu-uids:", err)
			return vmd.Config{}, "", "", 2
		}
		cfg.UIDs = r
	}
	q, err := resource.ParseQuantity(*diskCap)
	if err != nil || q.Sign() <= 0 {
		fmt.Fprintf(os.Stderr, "daemon: --disk-cap %q: want a positive quantity of bytes such as 20Gi\n", *diskCap)
		return vmd.Config{}, "", "", 2
	}
	cfg.DiskCap = uint64(q.Value())
	return cfg, *socket, *metricsAddr, 0
}
