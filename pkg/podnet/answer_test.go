package podnet

import (
	"net"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/insomniacslk/dhcp/dhcpv4"
)

// The DHCP policy without sockets; TestDHCP runs it through a real tap.

var (
	testMAC = net.HardwareAddr{0x02, 0x42, 0x0a, 0xf4, 0x00, 0x05}
	testPod = Pod{
		Interface: "eth0", MAC: testMAC, MTU: 1450,
		Addr:    netip.MustParsePrefix("10.244.0.5/24"),
		Gateway: netip.MustParseAddr("10.244.0.1"),
	}
)

func mustMessage(t *testing.T, mods ...dhcpv4.Modifier) *dhcpv4.DHCPv4 {
	t.Helper()
	m, err := dhcpv4.New(append([]dhcpv4.Modifier{dhcpv4.WithHwAddr(testMAC)}, mods...)...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestAnswerWho(t *testing.T) {
	sid := net.IP(testPod.Gateway.AsSlice())
	tests := []struct {
		name string
		req  *dhcpv4.DHCPv4
		want string // reply type, "" for no reply
	}{
		{"discover", mustMessage(t, dhcpv4.WithMessageType(dhcpv4.MessageTypeDiscover)), "OFFER"},
		{"discover from another MAC", mustMessage(t, dhcpv4.WithMessageType(dhcpv4.MessageTypeDiscover),
			dhcpv4.WithHwAddr(net.HardwareAddr{2, 0, 0, 0, 0, 1})), ""},
		{"a reply is no request", mustMessage(t, dhcpv4.WithMessageType(dhcpv4.MessageTypeOffer),
			func(d *dhcpv4.DHCPv4) { d.OpCode = dhcpv4.OpcodeBootReply }), ""},
		{"request for the pod IP", mustMessage(t, dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
			dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.IPv4(10, 244, 0, 5))),
			dhcpv4.WithOption(dhcpv4.OptServerIdentifier(sid))), "ACK"},
		{"request to another server", mustMessage(t, dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
			dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.IPv4(10, 244, 0, 5))),
			dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.IPv4(10, 244, 0, 2)))), ""},
		{"init-reboot with an old address", mustMessage(t, dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
			dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.IPv4(10, 244, 9, 9)))), "NAK"},
		{"renew", mustMessage(t, dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
			dhcpv4.WithClientIP(net.IPv4(10, 244, 0, 5))), "ACK"},
		{"inform", mustMessage(t, dhcpv4.WithMessageType(dhcpv4.MessageTypeInform),
			dhcpv4.WithClientIP(net.IPv4(10, 244, 0, 5))), "ACK"},
		{"release", mustMessage(t, dhcpv4.WithMessageType(dhcpv4.MessageTypeRelease)), ""},
		{"decline", mustMessage(t, dhcpv4.WithMessageType(dhcpv4.MessageTypeDecline)), ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp := answer(testPod, sid, tc.req)
			got := ""
			if resp != nil {
				got = resp.MessageType().String()
				if resp.TransactionID != tc.req.TransactionID {
					t.Errorf("reply xid %v, want the request's %v", resp.TransactionID, tc.req.TransactionID)
				}
				if !resp.ServerIdentifier().Equal(sid) {
					t.Errorf("server identifier %v, want %v", resp.ServerIdentifier(), sid)
				}
			}
			if got != tc.want {
				t.Fatalf("reply %q, want %q", got, tc.want)
			}
			if tc.name == "inform" {
				if !resp.YourIPAddr.IsUnspecified() || resp.Options.Has(dhcpv4.OptionIPAddressLeaseTime) {
					t.Errorf("ACK to INFORM carries yiaddr %v / a lease time: RFC 2131 3.4 says neither", resp.YourIPAddr)
				}
			}
		})
	}
}

func TestClasslessRoutes(t *testing.T) {
	tests := []struct {
		name string
		pod  func(p *Pod)
		want []string // "dst via router", in order; nil: no option 121
		mask string   // option 1; "255.255.255.0" when empty
	}{{
		name: "gateway in the prefix, no other routes: option 3 is enough",
		pod:  func(*Pod) {},
	}, {
		name: "ptp: the prefix off the link, the gateway on it",
		pod: func(p *Pod) {
			p.Routes = []Route{
				{Dst: netip.MustParsePrefix("10.244.0.0/24"), Via: netip.MustParseAddr("10.244.0.1")},
				{Dst: netip.MustParsePrefix("10.244.0.1/32")},
			}
			p.PrefixOffLink = true
		},
		want: []string{"10.244.0.1/32 via 0.0.0.0", "10.244.0.0/24 via 10.244.0.1", "0.0.0.0/0 via 10.244.0.1"},
		mask: "255.255.255.255",
	}, {
		name: "prefix off the link and no route to the gateway: one is added",
		pod:  func(p *Pod) { p.PrefixOffLink = true },
		want: []string{"10.244.0.1/32 via 0.0.0.0", "0.0.0.0/0 via 10.244.0.1"},
		mask: "255.255.255.255",
	}, {
		name: "calico: /32 address, on-link gateway route",
		pod: func(p *Pod) {
			p.Addr = netip.MustParsePrefix("10.1.2.3/32")
			p.Gateway = netip.MustParseAddr("169.254.1.1")
			p.Routes = []Route{{Dst: netip.MustParsePrefix("169.254.1.1/32")}}
		},
		want: []string{"169.254.1.1/32 via 0.0.0.0", "0.0.0.0/0 via 169.254.1.1"},
		mask: "255.255.255.255",
	}, {
		name: "gateway outside the prefix and no route to it: one is added",
		pod: func(p *Pod) {
			p.Addr = netip.MustParsePrefix("10.1.2.3/32")
			p.Gateway = netip.MustParseAddr("169.254.1.1")
		},
		want: []string{"169.254.1.1/32 via 0.0.0.0", "0.0.0.0/0 via 169.254.1.1"},
		mask: "255.255.255.255",
	}, {
		name: "extra routes: on-link first, default last",
		pod: func(p *Pod) {
			p.Routes = []Route{
				{Dst: netip.MustParsePrefix("10.96.0.0/12"), Via: netip.MustParseAddr("10.244.0.1")},
				{Dst: netip.MustParsePrefix("192.168.50.0/24")},
			}
		},
		want: []string{"192.168.50.0/24 via 0.0.0.0", "10.96.0.0/12 via 10.244.0.1", "0.0.0.0/0 via 10.244.0.1"},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := testPod
			tc.pod(&p)
			offer := answer(p, net.IP(p.Gateway.AsSlice()), mustMessage(t, dhcpv4.WithMessageType(dhcpv4.MessageTypeDiscover)))
			var got []string
			for _, r := range offer.ClasslessStaticRoute() {
				got = append(got, r.Dest.String()+" via "+r.Router.String())
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("option 121 (-want +got):\n%s", diff)
			}
			if !offer.YourIPAddr.Equal(net.IP(p.Addr.Addr().AsSlice())) {
				t.Errorf("yiaddr %v, want %v", offer.YourIPAddr, p.Addr.Addr())
			}
			wantMask := tc.mask
			if wantMask == "" {
				wantMask = "255.255.255.0"
			}
			if got := net.IP(offer.SubnetMask()).String(); got != wantMask {
				t.Errorf("subnet mask %s, want %s", got, wantMask)
			}
		})
	}
}
