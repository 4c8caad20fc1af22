package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/vmpod/vmpod/pkg/host"
	"github.com/vmpod/vmpod/pkg/labeller"
	"github.com/vmpod/vmpod/pkg/node"
	"github.com/vmpod/vmpod/pkg/node/embedded"
)

func labellerCmd(args []string) int {
	fs := flag.NewFlagSet("labeller", flag.ContinueOnError)
	nodeName := fs.String("node-name", os.Getenv("NODE_NAME"), "Node to label (default $NODE_NAME)")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file; default: the in-cluster config")
	interval := fs.Duration("interval", labeller.DefaultInterval, "how often the node's labels are checked and repaired")
	capsInterval := fs.Duration("capabilities-interval", labeller.DefaultCapabilitiesInterval, "how often the node's capabilities are read again")
	once := fs.Bool("once", false, "label the node once and exit")
	caps := fs.String("capabilities", "", "libvirt capabilities XML to use instead of asking this node's QEMU (read again each time)")
	domCaps := fs.String("domain-capabilities", "", "libvirt domain capabilities XML that goes with --capabilities")
	capsCache := fs.String("capabilities-cache", DefaultCapsCache, "node-wide warm copy of libvirt's QEMU capabilities")
	kvmCache := fs.String("kvm-cache", node.DefaultKVMCache, "node-wide KVM probe verdict, shared with the shim")
	verbose := fs.Bool("v", false, "log every label change")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 || (*domCaps != "" && *caps == "") {
		fmt.Fprintln(os.Stderr, "labeller: unexpected arguments, or --domain-capabilities without --capabilities")
		return 2
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	cfg, err := restConfig(*kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, "labeller:", err)
		return 1
	}
	client, err := kubernetes.NewForConfig(rest.AddUserAgent(cfg, labeller.FieldManager))
	if err != nil {
		fmt.Fprintln(os.Stderr, "labeller:", err)
		return 1
	}
	source, closeSource, err := capabilitySource(ctx, *caps, *domCaps, *capsCache, *kvmCache)
	if err != nil {
		fmt.Fprintln(os.Stderr, "labeller:", err)
		return 1
	}
	defer closeSource()

	r := &labeller.Reconciler{
		Nodes:                client.CoreV1().Nodes(),
		Events:               client.CoreV1(),
		NodeName:             *nodeName,
		Capabilities:         source,
		Interval:             *interval,
		CapabilitiesInterval: *capsInterval,
		Log:                  log,
	}
	if err := r.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if *once {
		c, err := r.Once(ctx)
		if err != nil {
			fmt.Fprintln(os.Stderr, "labeller:", err)
			return 1
		}
		fmt.Printf("node %s: %d labels set, %d removed\n", *nodeName, len(c.Set), len(c.Remove))
		return 0
	}
	log.Info("labelling", "node", *nodeName, "interval", *interval, "capabilities-interval", *capsInterval)
	if err := r.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "labeller:", err)
		return 1
	}
	return 0
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		return clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	cfg, err := rest.InClusterConfig()
	if errors.Is(err, rest.ErrNotInCluster) {
		return nil, fmt.Errorf("%w: pass --kubeconfig", err)
	}
	return cfg, err
}

// capabilitySource reads the given files on every call, or this node's
// QEMU through an embedded libvirt root that lives as long as the process
// (libvirt revalidates its QEMU capabilities on every read: a new QEMU
// binary or /dev/kvm appearing changes them), with KVM as the probe's
// cached verdict says (probed again when QEMU, the kernel or /dev/kvm
// change).
func capabilitySource(ctx context.Context, capsFile, domCapsFile, cacheDir, kvmCache string) (func(context.Context) (host.Host, error), func(), error) {
	if capsFile != "" {
		return func(context.Context) (host.Host, error) {
			return node.FromFiles(capsFile, domCapsFile)
		}, func() {}, nil
	}
	root, err := os.MkdirTemp("", "vmpod-labeller-")
	if err != nil {
		return nil, nil, err
	}
	openCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	o := node.Options{CapsCache: cacheDir, KVMCache: kvmCache}
	conn, err := embedded.Open(openCtx, root, o)
	if err != nil {
		os.RemoveAll(root)
		return nil, nil, err
	}
	return func(ctx context.Context) (host.Host, error) {
			return node.HostOf(ctx, conn, o)
		}, func() {
			conn.Close()
			os.RemoveAll(root)
		}, nil
}
