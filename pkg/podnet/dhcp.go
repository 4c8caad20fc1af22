package podnet

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/server4"
)

// LeaseTime is the lease the guest gets. The pod IP is the pod's for its
// whole life, so renewing is a formality. It is long because renewals are
// the one thing that does not work perfectly here: a client renews by
// unicast to the server identifier, which it sends to the gateway's MAC; the
// tap passes it up to the pod's stack, which drops a frame for another MAC.
// The client then rebinds by broadcast (RFC 2131 4.4.5), and that is
// answered.
const LeaseTime = 365 * 24 * time.Hour

// dhcpServer answers DHCPv4 on the tap for one client: the guest, which is
// not trusted. One goroutine reads and answers, a packet at a time, so a
// flood costs a parse and at most one reply per packet and never another
// goroutine; what the server cannot keep up with, the socket's receive
// buffer drops. Its per-packet logging is rate-limited (rateLog).
type dhcpServer struct {
	pod Pod
	// serverID is the gateway: it is what the guest already knows as the
	// next hop, and the pod network namespace owns no address the guest
	// could reach instead (the pod IP is the guest's own).
	serverID net.IP
	conn     *net.UDPConn
	log      *rateLog
	done     chan struct{}
	// leased is when the server last acknowledged the pod IP to the
	// guest (Unix nanoseconds; 0 never): the guest holds it from then.
	leased atomic.Int64
}

const (
	// dhcpReadSize holds any UDP datagram, so none is cut short.
	dhcpReadSize = 1 << 16
	// dhcpWriteTimeout bounds a reply that the kernel cannot take.
	dhcpWriteTimeout = time.Second
	// dhcpReadErrorPause keeps a failing socket from spinning the loop.
	dhcpReadErrorPause = 100 * time.Millisecond
	// logEvery is how often each kind of per-packet record may be logged.
	logEvery = 30 * time.Second
)

// Kinds of per-packet log records (see rateLog).
const (
	logMalformed  = "malformed"
	logIgnored    = "ignored"
	logDecline    = "decline"
	logReadFailed = "read failed"
	logReply      = "reply failed"
	logAnswered   = "answered " // + the reply's type, one of three
)

// serveDHCP listens on UDP port 67 of the tap. The socket is bound to the
// tap, so it is created in the calling thread's network namespace and works
// from any goroutine afterwards.
func serveDHCP(p Pod, tap string) (*dhcpServer, error) {
	conn, err := server4.NewIPv4UDPConn(tap, &net.UDPAddr{Port: dhcpv4.ServerPort})
	if err != nil {
		return nil, fmt.Errorf("DHCP server on %q: %w", tap, err)
	}
	s := &dhcpServer{
		pod:      p,
		serverID: net.IP(p.Gateway.AsSlice()),
		conn:     conn,
		log:      newRateLog(slog.Default().With("component", "podnet-dhcp", "tap", tap), logEvery),
		done:     make(chan struct{}),
	}
	go s.serve()
	return s, nil
}

// close stops the server and then logs what rate limiting held back.
func (s *dhcpServer) close() error {
	err := s.conn.Close()
	<-s.done
	s.log.flush()
	return err
}

func (s *dhcpServer) serve() {
	defer close(s.done)
	buf := make([]byte, dhcpReadSize)
	for {
		n, _, err := s.conn.ReadFrom(buf)
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			s.log.Log(slog.LevelWarn, logReadFailed, "reading failed", "error", err)
			time.Sleep(dhcpReadErrorPause)
			continue
		}
		s.handle(buf[:n])
	}
}

func (s *dhcpServer) handle(b []byte) {
	req, err := dhcpv4.FromBytes(b)
	if err != nil {
		s.log.Log(slog.LevelDebug, logMalformed, "malformed message", "error", err)
		return
	}
	resp := answer(s.pod, s.serverID, req)
	if resp == nil {
		if req.MessageType() == dhcpv4.MessageTypeDecline && bytes.Equal(req.ClientHWAddr, s.pod.MAC) {
			// The guest saw another host answer ARP for the pod IP.
			s.log.Log(slog.LevelWarn, logDecline, "guest declined the pod IP: address conflict on the pod network", "ip", s.pod.Addr.Addr())
			return
		}
		s.log.Log(slog.LevelDebug, logIgnored, "ignored", "type", req.MessageType(), "chaddr", req.ClientHWAddr)
		return
	}
	// Always broadcast: a client without an address cannot answer ARP, and
	// a UDP socket cannot address a frame to its MAC. Sending to the pod IP
	// instead would loop back, since the pod netns holds it too. The kernel
	// picks the pod IP as the source (the tap has no address); clients go by
	// the server identifier option, not the source.
	dst := &net.UDPAddr{IP: net.IPv4bcast, Port: dhcpv4.ClientPort}
	if err := s.conn.SetWriteDeadline(time.Now().Add(dhcpWriteTimeout)); err != nil {
		return // closed
	}
	// The lease is recorded before the ACK leaves, so that whoever sees
	// the guest holding the address sees it in Leased too, and taken back
	// if the ACK never left.
	var before, at int64
	if resp.MessageType() == dhcpv4.MessageTypeAck && !resp.YourIPAddr.IsUnspecified() {
		at = time.Now().UnixNano()
		before = s.leased.Swap(at)
	}
	if _, err := s.conn.WriteTo(resp.ToBytes(), dst); err != nil {
		if at != 0 {
			s.leased.CompareAndSwap(at, before)
		}
		s.log.Log(slog.LevelWarn, logReply, "reply failed", "type", resp.MessageType(), "error", err)
		return
	}
	s.log.Log(slog.LevelDebug, logAnswered+resp.MessageType().String(), "answered",
		"request", req.MessageType(), "reply", resp.MessageType(), "ip", resp.YourIPAddr)
}

// answer is the whole DHCP policy: one client (the pod's MAC), one address
// (the pod's). It returns nil for messages that get no reply.
func answer(p Pod, serverID net.IP, req *dhcpv4.DHCPv4) *dhcpv4.DHCPv4 {
	if req.OpCode != dhcpv4.OpcodeBootRequest || !bytes.Equal(req.ClientHWAddr, p.MAC) {
		return nil
	}
	podIP := net.IP(p.Addr.Addr().AsSlice())
	var mods []dhcpv4.Modifier
	switch req.MessageType() {
	case dhcpv4.MessageTypeDiscover:
		mods = append(mods, dhcpv4.WithMessageType(dhcpv4.MessageTypeOffer), dhcpv4.WithYourIP(podIP))
		mods = append(mods, leaseOptions(p)...)
	case dhcpv4.MessageTypeRequest:
		if sid := req.ServerIdentifier(); sid != nil && !sid.Equal(serverID) {
			return nil // the client took another server's offer
		}
		want := req.RequestedIPAddress() // SELECTING, INIT-REBOOT
		if want == nil {
			want = req.ClientIPAddr // RENEWING, REBINDING
		}
		if !want.Equal(podIP) {
			mods = append(mods, dhcpv4.WithMessageType(dhcpv4.MessageTypeNak),
				dhcpv4.WithOption(dhcpv4.OptMessage("the only address for this MAC is "+podIP.String())))
			break
		}
		mods = append(mods, dhcpv4.WithMessageType(dhcpv4.MessageTypeAck), dhcpv4.WithYourIP(podIP))
		mods = append(mods, leaseOptions(p)...)
	case dhcpv4.MessageTypeInform:
		// The client has its address and wants the rest (RFC 2131 3.4): no
		// yiaddr, no lease time.
		mods = append(mods, dhcpv4.WithMessageType(dhcpv4.MessageTypeAck))
		mods = append(mods, configOptions(p)...)
	default:
		// Release, Decline: there is no pool to return the address to.
		return nil
	}
	mods = append(mods, dhcpv4.WithOption(dhcpv4.OptServerIdentifier(serverID)))
	resp, err := dhcpv4.NewReplyFromRequest(req, mods...)
	if err != nil {
		return nil // only fails when it cannot draw a transaction ID; a reply copies it
	}
	return resp
}

func leaseOptions(p Pod) []dhcpv4.Modifier {
	return append(configOptions(p), dhcpv4.WithOption(dhcpv4.OptIPAddressLeaseTime(LeaseTime)))
}

// configOptions is everything the guest learns besides its address.
func configOptions(p Pod) []dhcpv4.Modifier {
	gw := net.IP(p.Gateway.AsSlice())
	mods := []dhcpv4.Modifier{
		dhcpv4.WithNetmask(net.CIDRMask(p.guestAddr().Bits(), 32)),
		dhcpv4.WithOption(dhcpv4.OptRouter(gw)),
		dhcpv4.WithOption(dhcpv4.OptGeneric(dhcpv4.OptionInterfaceMTU, binary.BigEndian.AppendUint16(nil, uint16(p.MTU)))),
	}
	if routes := classlessRoutes(p); routes != nil {
		mods = append(mods, dhcpv4.WithOption(dhcpv4.OptClasslessStaticRoute(routes...)))
	}
	if len(p.DNS.Servers) > 0 {
		servers := make([]net.IP, 0, len(p.DNS.Servers))
		for _, a := range p.DNS.Servers {
			servers = append(servers, net.IP(a.AsSlice()))
		}
		mods = append(mods, dhcpv4.WithOption(dhcpv4.OptDNS(servers...)))
	}
	if len(p.DNS.Search) > 0 {
		// Option 15 for clients that only know a single domain (udhcpc's
		// $domain), 119 for the whole list.
		mods = append(mods, dhcpv4.WithOption(dhcpv4.OptDomainName(p.DNS.Search[0])),
			dhcpv4.WithDomainSearchList(p.DNS.Search...))
	}
	if opts := resolvOptions(p.DNS.Options); opts != "" {
		mods = append(mods, dhcpv4.WithOption(dhcpv4.OptGeneric(OptionResolvOptions, []byte(opts))))
	}
	if p.Hostname != "" {
		mods = append(mods, dhcpv4.WithOption(dhcpv4.OptHostName(p.Hostname)))
	}
	return mods
}

// OptionResolvOptions is the DHCP option that carries the pod's resolver
// options (resolv.conf's "options" line, e.g. "ndots:5"), which no standard
// option does: 224, the first of the site-specific codes (RFC 3942), as
// text, the options separated by spaces. A guest whose DHCP client asks
// for it writes them into its resolv.conf (the test guest's udhcpc script
// does; docs/containerdisk.md shows dhclient's and systemd-networkd's
// ways); others ignore it.
const OptionResolvOptions = dhcpv4.GenericOptionCode(224)

// resolvOptions is the option's text: as many whole options as fit in
// one DHCP option (255 bytes).
func resolvOptions(opts []string) string {
	var b strings.Builder
	for _, o := range opts {
		if b.Len()+len(o)+1 > 255 {
			break
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(o)
	}
	return b.String()
}

// classlessRoutes is option 121, sent only when the router option alone
// would be wrong: the pod has more routes, or its gateway lies outside the
// guest's prefix (guestAddr: a /32 when the pod's prefix is not on the
// link) and must be declared on-link first. A client that takes option 121
// ignores option 3 (RFC 3442), so the default route is repeated in it.
func classlessRoutes(p Pod) []*dhcpv4.Route {
	prefix := p.guestAddr().Masked()
	if len(p.Routes) == 0 && prefix.Contains(p.Gateway) {
		return nil
	}
	var routes []*dhcpv4.Route
	add := func(dst netip.Prefix, via netip.Addr) {
		router := net.IPv4zero.To4() // 0.0.0.0 = on the link
		if via.IsValid() {
			router = net.IP(via.AsSlice())
		}
		routes = append(routes, &dhcpv4.Route{
			Dest:   &net.IPNet{IP: net.IP(dst.Addr().AsSlice()), Mask: net.CIDRMask(dst.Bits(), 32)},
			Router: router,
		})
	}
	// On-link routes first: a client installs them in order, and a route via
	// a router needs the router reachable already.
	onLink := prefix.Contains(p.Gateway)
	for _, r := range p.Routes {
		if !r.Via.IsValid() {
			add(r.Dst, r.Via)
			onLink = onLink || r.Dst.Contains(p.Gateway)
		}
	}
	if !onLink {
		add(netip.PrefixFrom(p.Gateway, 32), netip.Addr{})
	}
	for _, r := range p.Routes {
		if r.Via.IsValid() {
			add(r.Dst, r.Via)
		}
	}
	add(netip.PrefixFrom(netip.IPv4Unspecified(), 0), p.Gateway)
	return routes
}
