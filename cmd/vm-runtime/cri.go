package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/vmpod/vmpod/pkg/cri"
)

func criCmd(args []string) int {
	cfg, listen, metricsAddr, code := criFlags(args)
	if code != 0 {
		return code
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	s, err := cri.New(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cri:", err)
		return 1
	}
	defer s.Close()
	if err := serveMetrics(ctx, metricsAddr, s.MetricsHandler()); err != nil {
		fmt.Fprintln(os.Stderr, "cri:", err)
		return 1
	}
	if err := s.Serve(ctx, listen); err != nil {
		fmt.Fprintln(os.Stderr, "cri:", err)
		return 1
	}
	return 0
}

// criFlags parses cri's flags into the server's config, the socket to
// serve and the metrics address ("": none); a non-zero code is the exit
// code of a bad command line.
func criFlags(args []string) (cri.Config, string, string, int) {
	fs := flag.NewFlagSet("cri", flag.ContinueOnError)
	listen := fs.String("listen", "unix:///run/vmpod/cri.sock", "the CRI socket the kubelet's containerRuntimeEndpoint names")
	vf := addVMFlags(fs, "images, pods' dirs, libvirt's root and checkpoints (on disk)")
	netnsDir := fs.String("netns-dir", "/run/vmpod/netns", "where pod network namespaces are mounted")
	cniConf := fs.String("cni-conf-dir", "/etc/cni/net.d", "the node's CNI config dir; its first file by name is the pod network")
	cniBin := fs.String("cni-bin-dir", "/opt/cni/bin,/usr/lib/cni", "comma-separated dirs of CNI plugins")
	imageBytes := fs.String("image-max-bytes", "", "the most an image's files may add up to, unpacked, sparse ones at their full size (default: the --disk-cap)")
	imageEntries := fs.Uint64("image-max-entries", cri.DefaultImageMaxEntries, "the most tar entries an image's layers may hold, with the dirs their paths imply")
	imageDepth := fs.Int("image-max-depth", cri.DefaultImageMaxDepth, "the most components a path in an image may have")
	streamAddr := fs.String("stream-address", cri.DefaultStreamAddr, "host:port of the exec/attach/port-forward streaming server the kubelet connects to (port 0: chosen at start)")
	cgroupParent := fs.String("default-cgroup-parent", cri.DefaultCgroupParent, "cgroupfs parent of the pods whose sandbox names no cgroup_parent (each gets <parent>/pod<sandbox id>)")
	metricsAddr := fs.String("metrics-address", "", "host:port to serve Prometheus metrics of the node's VMs at /metrics (docs/metrics.md); none by default")
	perPod := fs.Int("max-sessions-per-pod", cri.DefaultMaxSessionsPerPod, "the most execs (streamed or exec -s), attaches, or port-forward connections, each kind counted apart, open at once in one pod")
	perNode := fs.Int("max-sessions-per-node", cri.DefaultMaxSessionsPerNode, "the most execs, attaches, or port-forward connections, each kind counted apart, open at once on the node")
	mirrors := cri.Mirrors{}
	fs.Func("registry-mirror", "HOST=URL: fetch the images of registry HOST (as image names give it: registry.k8s.io, docker.io) from the registry at URL (http:// or https://, no path) alone, keeping their names; repeat for more registries", func(v string) error {
		host, u, err := cri.ParseMirror(v)
		if err != nil {
			return err
		}
		if _, dup := mirrors[host]; dup {
			return fmt.Errorf("registry %s has two mirrors", host)
		}
		mirrors[host] = u
		return nil
	})
	cgroupDriver := fs.String("cgroup-driver", "", "the node's cgroup driver, cgroupfs or systemd, which the kubelet takes from the runtime (default: systemd where systemd is the init system, else cgroupfs)")
	if err := fs.Parse(args); err != nil {
		return cri.Config{}, "", "", 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "cri: unexpected arguments:", fs.Args())
		return cri.Config{}, "", "", 2
	}
	vcfg, ok := vf.config("cri")
	if !ok {
		return cri.Config{}, "", "", 2
	}
	cfg := cri.Config{Config: vcfg,
		NetnsDir: *netnsDir, CNIConfDir: *cniConf, CNIBinDirs: strings.Split(*cniBin, ","),
		StreamAddr: *streamAddr, DefaultCgroupParent: *cgroupParent}
	if *cgroupDriver != "" {
		d, err := cri.ParseCgroupDriver(*cgroupDriver)
		if err != nil {
			fmt.Fprintln(os.Stderr, "cri: --cgroup-driver:", err)
			return cri.Config{}, "", "", 2
		}
		cfg.CgroupDriver = d
	}
	if *imageBytes != "" {
		q, err := resource.ParseQuantity(*imageBytes)
		if err != nil || q.Sign() <= 0 {
			fmt.Fprintf(os.Stderr, "cri: --image-max-bytes %q: want a positive quantity of bytes such as 20Gi\n", *imageBytes)
			return cri.Config{}, "", "", 2
		}
		cfg.ImageMaxBytes = uint64(q.Value())
	}
	if *imageEntries == 0 || *imageDepth <= 0 {
		fmt.Fprintln(os.Stderr, "cri: --image-max-entries and --image-max-depth: want positive numbers")
		return cri.Config{}, "", "", 2
	}
	cfg.ImageMaxEntries, cfg.ImageMaxDepth = *imageEntries, *imageDepth
	if *perPod <= 0 || *perNode <= 0 {
		fmt.Fprintf(os.Stderr, "cri: --max-sessions-per-pod %d, --max-sessions-per-node %d: want positive numbers\n", *perPod, *perNode)
		return cri.Config{}, "", "", 2
	}
	cfg.MaxSessionsPerPod, cfg.MaxSessionsPerNode = *perPod, *perNode
	if len(mirrors) > 0 {
		cfg.RegistryMirrors = mirrors
	}
	return cfg, *listen, *metricsAddr, 0
}
