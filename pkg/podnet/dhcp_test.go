package podnet_test

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/insomniacslk/dhcp/dhcpv4"

	"github.com/vmpod/vmpod/pkg/podnet"
)

var (
	bcastMAC = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	podIP    = netip.MustParseAddr("10.244.0.5")
	nodeIP   = netip.MustParseAddr("10.244.0.1")
)

// lease is what a reply tells the guest, in comparable form.
type lease struct {
	Type       string
	YourIP     string
	Mask       string
	Router     []string
	Routes     []string // option 121, "dst via router" in order
	DNS        []string
	MTU        uint16
	Hostname   string
	DomainName string
	Search     []string
	Options    string
	LeaseTime  time.Duration
	ServerID   string
}

func leaseOf(m *dhcpv4.DHCPv4) lease {
	l := lease{
		Type:       m.MessageType().String(),
		Hostname:   m.HostName(),
		DomainName: m.DomainName(),
		LeaseTime:  m.IPAddressLeaseTime(0),
	}
	if !m.YourIPAddr.IsUnspecified() {
		l.YourIP = m.YourIPAddr.String()
	}
	if mask := m.SubnetMask(); mask != nil {
		l.Mask = net.IP(mask).String()
	}
	for _, ip := range m.Router() {
		l.Router = append(l.Router, ip.String())
	}
	for _, r := range m.ClasslessStaticRoute() {
		l.Routes = append(l.Routes, r.Dest.String()+" via "+r.Router.String())
	}
	for _, ip := range m.DNS() {
		l.DNS = append(l.DNS, ip.String())
	}
	if mtu := m.GetOneOption(dhcpv4.OptionInterfaceMTU); len(mtu) == 2 {
		l.MTU = binary.BigEndian.Uint16(mtu)
	}
	if s := m.DomainSearch(); s != nil {
		l.Search = s.Labels
	}
	l.Options = string(m.GetOneOption(podnet.OptionResolvOptions))
	if id := m.ServerIdentifier(); id != nil {
		l.ServerID = id.String()
	}
	return l
}

// exchange sends a DHCP message from the guest, broadcast, from src (the
// zero address before the guest has a lease), and returns the reply with the
// same transaction ID. Like a DHCP client it sends again, up to tries times,
// a second apart; it returns nil if no reply came.
func (g *tapGuest) exchange(t testing.TB, req *dhcpv4.DHCPv4, src netip.Addr, tries int) *dhcpv4.DHCPv4 {
	t.Helper()
	frame := udpFrame(udpPacket{
		srcMAC: g.mac, dstMAC: bcastMAC,
		src:     netip.AddrPortFrom(src, dhcpv4.ClientPort),
		dst:     netip.AddrPortFrom(netip.AddrFrom4([4]byte{255, 255, 255, 255}), dhcpv4.ServerPort),
		payload: req.ToBytes(),
	})
	for range tries {
		g.send(t, frame)
		var resp *dhcpv4.DHCPv4
		_, ok := g.receive(t, time.Second, func(p udpPacket) bool {
			if p.dst.Port() != dhcpv4.ClientPort {
				return false
			}
			m, err := dhcpv4.FromBytes(p.payload)
			if err != nil || m.TransactionID != req.TransactionID {
				return false
			}
			resp = m
			return true
		})
		if ok {
			return resp
		}
	}
	return nil
}

// checkLease runs a DISCOVER/REQUEST exchange from the pod's MAC, checks
// the OFFER and the ACK against want (whose Type is "OFFER") and returns
// the OFFER.
func (g *tapGuest) checkLease(t testing.TB, want lease, tries int) *dhcpv4.DHCPv4 {
	t.Helper()
	discover, err := dhcpv4.NewDiscovery(podMAC)
	if err != nil {
		t.Fatal(err)
	}
	offer := g.exchange(t, discover, netip.IPv4Unspecified(), tries)
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
	if ack := g.exchange(t, request, netip.IPv4Unspecified(), tries); ack == nil {
		t.Error("no ACK for the REQUEST")
	} else if diff := cmp.Diff(want, leaseOf(ack)); diff != "" {
		t.Errorf("ACK (-want +got):\n%s", diff)
	}
	return offer
}

func TestDHCP(t *testing.T) {
	tp := newTopology(t)
	resolv := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(resolv, []byte("search default.svc.cluster.local svc.cluster.local cluster.local\nnameserver 10.96.0.10\noptions ndots:5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dns, err := podnet.ResolvConf(resolv)
	if err != nil {
		t.Fatal(err)
	}
	a := attach(t, tp, func(p *podnet.Pod) { p.DNS, p.Hostname = dns, "web-0" })
	guest := openTap(t, tp.pod, tapName, podMAC)

	// Anything reaching the node on port 67 would be DHCP that leaked.
	var leak *net.UDPConn
	if err := inNetns(tp.node, func() (err error) {
		leak, err = net.ListenUDP("udp4", &net.UDPAddr{Port: dhcpv4.ServerPort})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer leak.Close()

	want := lease{
		Type:       "OFFER",
		YourIP:     "10.244.0.5",
		Mask:       "255.255.255.0",
		Router:     []string{"10.244.0.1"},
		DNS:        []string{"10.96.0.10"},
		MTU:        podMTU,
		Hostname:   "web-0",
		DomainName: "default.svc.cluster.local",
		Search:     []string{"default.svc.cluster.local", "svc.cluster.local", "cluster.local"},
		Options:    "ndots:5",
		LeaseTime:  podnet.LeaseTime,
		ServerID:   "10.244.0.1",
	}
	const tries = 3

	other := net.HardwareAddr{0x02, 0, 0, 0, 0, 0x99}
	discover, err := dhcpv4.NewDiscovery(other)
	if err != nil {
		t.Fatal(err)
	}
	if resp := guest.exchange(t, discover, netip.IPv4Unspecified(), 1); resp != nil {
		t.Errorf("a DISCOVER from %s, not the pod's MAC, was answered: %s", other, resp.Summary())
	}

	if l := a.Leased(); !l.IsZero() {
		t.Errorf("Leased() = %v before any ACK", l)
	}
	beforeLease := time.Now()
	offer := guest.checkLease(t, want, tries)
	want.Type = "ACK"
	leased := a.Leased()
	if leased.Before(beforeLease) || leased.After(time.Now()) {
		t.Errorf("Leased() = %v after the ACK at about %v", leased, beforeLease)
	}

	wrong, err := dhcpv4.NewRequestFromOffer(offer, dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.IPv4(10, 244, 0, 99))))
	if err != nil {
		t.Fatal(err)
	}
	if nak := guest.exchange(t, wrong, netip.IPv4Unspecified(), tries); nak == nil || nak.MessageType() != dhcpv4.MessageTypeNak {
		t.Errorf("REQUEST for 10.244.0.99: want a NAK, got %v", nak)
	}
	if l := a.Leased(); !l.Equal(leased) {
		t.Errorf("a NAK moved Leased() from %v to %v", leased, l)
	}

	// REBINDING (RFC 2131 4.4.5): broadcast, from the leased address, no
	// server identifier. The pod netns holds that address too, which is why
	// the tap accepts local sources.
	rebind, err := dhcpv4.New(dhcpv4.WithHwAddr(podMAC), dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
		dhcpv4.WithClientIP(net.IP(podIP.AsSlice())), dhcpv4.WithBroadcast(true))
	if err != nil {
		t.Fatal(err)
	}
	if ack := guest.exchange(t, rebind, podIP, tries); ack == nil {
		t.Error("no ACK for a rebinding REQUEST from the pod IP")
	} else if diff := cmp.Diff(want, leaseOf(ack)); diff != "" {
		t.Errorf("rebinding ACK (-want +got):\n%s", diff)
	}

	if err := leak.SetReadDeadline(time.Now().Add(100 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if _, from, err := leak.ReadFromUDP(make([]byte, 1500)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("DHCP reached the node (from %v, err %v): the tap's DHCP filter let it through", from, err)
	}
}

// TestDataPath checks the redirects both ways with plain UDP, and that the
// pod's own stack sees none of it.
func TestDataPath(t *testing.T) {
	tp := newTopology(t)
	attach(t, tp, nil)
	guest := openTap(t, tp.pod, tapName, podMAC)
	const port = 9999

	listen := func(ns string, ip netip.Addr) *net.UDPConn {
		t.Helper()
		var c *net.UDPConn
		if err := inNetns(ns, func() (err error) {
			c, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(ip, port)))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	node := listen(tp.node, nodeIP)
	podStack := listen(tp.pod, netip.IPv4Unspecified())

	// A datagram can be lost on a loaded machine (an skb allocation in
	// softirq failing, say), so each direction gets three tries, a second
	// apart: a broken redirect fails all three.
	const tries = 3

	// Guest to node: the frame leaves the pod interface unchanged.
	buf := make([]byte, 1500)
	for try := 1; ; try++ {
		guest.send(t, udpFrame(udpPacket{
			srcMAC: podMAC, dstMAC: nodeMAC,
			src:     netip.AddrPortFrom(podIP, 40000),
			dst:     netip.AddrPortFrom(nodeIP, port),
			payload: []byte("hello node"),
		}))
		node.SetReadDeadline(time.Now().Add(time.Second))
		n, from, err := node.ReadFromUDPAddrPort(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) && try < tries {
			t.Logf("try %d: nothing reached the node", try)
			continue
		}
		if err != nil {
			t.Fatalf("node: %v", err)
		}
		if got := string(buf[:n]); got != "hello node" || from != netip.AddrPortFrom(podIP, 40000) {
			t.Errorf("node got %q from %v, want %q from %s:40000", got, from, "hello node", podIP)
		}
		break
	}

	// Node to guest. The node resolves the pod IP by ARP, which only the
	// guest could answer; this guest does not speak ARP, so tell the node.
	run(t, "ip", "-n", tp.node, "neigh", "replace", podIP.String(), "lladdr", podMAC.String(), "dev", nodeIf)
	for try := 1; ; try++ {
		if _, err := node.WriteToUDPAddrPort([]byte("hello guest"), netip.AddrPortFrom(podIP, port)); err != nil {
			t.Fatal(err)
		}
		p, ok := guest.receive(t, time.Second, func(p udpPacket) bool { return p.dst.Port() == port })
		if !ok && try < tries {
			t.Logf("try %d: nothing reached the guest", try)
			continue
		}
		if !ok {
			t.Log(run(t, "tc", "-n", tp.pod, "-s", "filter", "show", "dev", podIf, "ingress"))
			t.Log(run(t, "ip", "-n", tp.pod, "-s", "link", "show"))
			t.Log(run(t, "ip", "-n", tp.node, "-s", "link", "show"))
			t.Fatal("the guest got nothing from the node")
		}
		if string(p.payload) != "hello guest" || p.src != netip.AddrPortFrom(nodeIP, port) || p.dstMAC.String() != podMAC.String() {
			t.Errorf("guest got %q from %v to MAC %s, want %q from %s:%d to %s", p.payload, p.src, p.dstMAC, "hello guest", nodeIP, port, podMAC)
		}
		break
	}

	podStack.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if n, from, err := podStack.ReadFromUDP(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("the pod netns's own stack received %q from %v (err %v): the pod interface's redirect let it through", buf[:n], from, err)
	}
}
