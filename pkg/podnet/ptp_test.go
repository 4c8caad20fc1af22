package podnet_test

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/insomniacslk/dhcp/dhcpv4"

	"github.com/vmpod/vmpod/pkg/podnet"
)

// neighbourIP is the other pod on the node in the ptp layout.
var neighbourIP = netip.MustParseAddr("10.244.0.7")

// ptpTopology is a node as CNI's ptp plugin leaves it (kind's kindnetd uses
// that plugin), with two pods:
//
//	node netns: veth0 10.244.0.1/32, route 10.244.0.5/32 dev veth0 ── pod netns:       eth0 10.244.0.5/24
//	            veth1 10.244.0.1/32, route 10.244.0.7/32 dev veth1 ── neighbour netns: eth0 10.244.0.7/24
//
// In each pod netns the kernel's connected route 10.244.0.0/24 dev eth0 is
// gone; instead 10.244.0.1 dev eth0 scope link, 10.244.0.0/24 via
// 10.244.0.1 and default via 10.244.0.1. So nothing but the gateway is on
// the link: the node forwards from pod to pod, and it answers ARP for the
// gateway alone (no proxy ARP).
type ptpTopology struct {
	topology
	neighbour string
}

func newPTPTopology(t testing.TB) ptpTopology {
	t.Helper()
	tp := ptpTopology{topology: topology{node: newNetns(t, "node"), pod: newNetns(t, "pod")}, neighbour: newNetns(t, "neighbour")}
	node := func(args ...string) { run(t, append([]string{"ip", "-n", tp.node}, args...)...) }
	sysctl := func(ns, kv string) { run(t, "ip", "netns", "exec", ns, "sysctl", "-q", "-w", kv) }
	node("link", "set", "lo", "up")
	sysctl(tp.node, "net.ipv4.ip_forward=1")
	sysctl(tp.node, "net.ipv4.conf.all.proxy_arp=0")
	for _, p := range []struct {
		ns, nodeIf, ip string
		mac            []string
	}{
		{tp.pod, nodeIf, podIP.String(), []string{"address", nodeMAC.String(), "type", "veth", "peer", "name", podIf, "address", podMAC.String()}},
		{tp.neighbour, "veth1", neighbourIP.String(), []string{"type", "veth", "peer", "name", podIf}},
	} {
		node(append(append([]string{"link", "add", p.nodeIf}, p.mac...), "netns", p.ns)...)
		node("link", "set", p.nodeIf, "mtu", fmt.Sprint(podMTU), "up")
		sysctl(tp.node, "net.ipv4.conf."+p.nodeIf+".proxy_arp=0")
		node("addr", "add", nodeIP.String()+"/32", "dev", p.nodeIf)
		node("route", "add", p.ip+"/32", "dev", p.nodeIf)

		pod := func(args ...string) { run(t, append([]string{"ip", "-n", p.ns}, args...)...) }
		pod("link", "set", "lo", "up")
		pod("link", "set", podIf, "mtu", fmt.Sprint(podMTU), "up")
		pod("addr", "add", p.ip+"/24", "dev", podIf)
		pod("route", "add", "default", "via", nodeIP.String(), "dev", podIf)
		pod("route", "del", "10.244.0.0/24", "dev", podIf)
		pod("route", "add", nodeIP.String()+"/32", "dev", podIf, "scope", "link", "src", p.ip)
		pod("route", "add", "10.244.0.0/24", "via", nodeIP.String(), "dev", podIf, "src", p.ip)
	}
	return tp
}

// TestDHCPPrefixOffLink: in the ptp layout the guest gets the pod IP as a
// /32, the gateway declared on the link, and the pod's routes.
func TestDHCPPrefixOffLink(t *testing.T) {
	tp := newPTPTopology(t)
	attach(t, tp.topology, nil)
	guest := openTap(t, tp.pod, tapName, podMAC)

	want := lease{
		Type:   "OFFER",
		YourIP: "10.244.0.5",
		Mask:   "255.255.255.255",
		Router: []string{"10.244.0.1"},
		// On-link first (RFC 3442: router 0.0.0.0), then the pod's own
		// route for its prefix, then the default route, since a client
		// that takes option 121 ignores option 3.
		Routes:    []string{"10.244.0.1/32 via 0.0.0.0", "10.244.0.0/24 via 10.244.0.1", "0.0.0.0/0 via 10.244.0.1"},
		MTU:       podMTU,
		LeaseTime: podnet.LeaseTime,
		ServerID:  "10.244.0.1",
	}
	const tries = 3
	discover, err := dhcpv4.NewDiscovery(podMAC)
	if err != nil {
		t.Fatal(err)
	}
	offer := guest.exchange(t, discover, netip.IPv4Unspecified(), tries)
	if offer == nil {
		t.Fatal("no OFFER")
	}
	if diff := cmp.Diff(want, leaseOf(offer)); diff != "" {
		t.Errorf("OFFER (-want +got):\n%s", diff)
	}
	request, err := dhcpv4.NewRequestFromOffer(offer)
	if err != nil {
		t.Fatal(err)
	}
	want.Type = "ACK"
	if ack := guest.exchange(t, request, netip.IPv4Unspecified(), tries); ack == nil {
		t.Error("no ACK for the REQUEST")
	} else if diff := cmp.Diff(want, leaseOf(ack)); diff != "" {
		t.Errorf("ACK (-want +got):\n%s", diff)
	}
}
