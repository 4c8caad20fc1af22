// Command nodenet is the pod network of vmpod's kind node image, in place
// of kind's kindnetd (whose source is not in the kind module, so it cannot
// be built here). It runs on every node as a host-network DaemonSet
// (hack/kind/node/default-cni.yaml) and does the two things kindnetd does
// for a plain kind cluster:
//
//   - writes the node's CNI config: Debian's ptp and host-local plugins on
//     the node's spec.podCIDR, and portmap, as kindnetd writes it;
//   - routes every other node's spec.podCIDR through that node's
//     InternalIP, so pods on different nodes reach each other.
//
// No masquerading and no network policy: a kind cluster built here has no
// way out anyway. It polls the Node list; a change shows within a few
// seconds.
package main

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

const confFile = "/etc/cni/net.d/10-kindnet.conflist"

// conflist is what kindnetd writes, with the plugins Debian ships.
const conflist = `{
  "cniVersion": "0.3.1",
  "name": "kindnet",
  "plugins": [
    {
      "type": "ptp",
      "ipMasq": false,
      "ipam": {
        "type": "host-local",
        "dataDir": "/run/cni-ipam-state",
        "routes": [{"dst": "0.0.0.0/0"}],
        "ranges": [[{"subnet": "%s"}]]
      },
      "mtu": 1500
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`

func main() {
	nodeName := os.Getenv("NODE_NAME")
	if nodeName == "" {
		log.Fatal("NODE_NAME is not set (the DaemonSet passes spec.nodeName)")
	}
	cfg, err := rest.InClusterConfig()
	if err != nil {
		log.Fatal(err)
	}
	// kind patches this in so that the pod network does not wait for
	// kube-proxy to make the kubernetes Service reachable.
	if ep := os.Getenv("CONTROL_PLANE_ENDPOINT"); ep != "" {
		cfg.Host = "https://" + ep
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		log.Fatal(err)
	}
	for {
		if err := sync(context.Background(), client, nodeName); err != nil {
			log.Print(err)
		}
		time.Sleep(5 * time.Second)
	}
}

func sync(ctx context.Context, client kubernetes.Interface, nodeName string) error {
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing nodes: %w", err)
	}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		if n.Spec.PodCIDR == "" {
			continue
		}
		if n.Name == nodeName {
			if err := writeConf(n.Spec.PodCIDR); err != nil {
				return err
			}
			continue
		}
		if err := route(n); err != nil {
			log.Print(err)
		}
	}
	return nil
}

// writeConf writes the CNI config when it changed, atomically: the
// runtime may read it at any time.
func writeConf(podCIDR string) error {
	want := []byte(fmt.Sprintf(conflist, podCIDR))
	if have, err := os.ReadFile(confFile); err == nil && bytes.Equal(have, want) {
		return nil
	}
	tmp, err := os.CreateTemp(filepath.Dir(confFile), ".nodenet-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(want); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), confFile); err != nil {
		return err
	}
	log.Printf("wrote %s for %s", confFile, podCIDR)
	return nil
}

// route sends node n's pod CIDR to n's InternalIP.
func route(n *corev1.Node) error {
	_, dst, err := net.ParseCIDR(n.Spec.PodCIDR)
	if err != nil {
		return fmt.Errorf("node %s: podCIDR %q: %w", n.Name, n.Spec.PodCIDR, err)
	}
	var gw net.IP
	for _, a := range n.Status.Addresses {
		if ip := net.ParseIP(a.Address); a.Type == corev1.NodeInternalIP && ip != nil && (ip.To4() != nil) == (dst.IP.To4() != nil) {
			gw = ip
			break
		}
	}
	if gw == nil {
		return fmt.Errorf("node %s has no InternalIP of %s's family yet", n.Name, dst)
	}
	if err := netlink.RouteReplace(&netlink.Route{Dst: dst, Gw: gw}); err != nil {
		return fmt.Errorf("route %s via %s (node %s): %w", dst, gw, n.Name, err)
	}
	return nil
}
