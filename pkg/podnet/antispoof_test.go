package podnet_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestAntiSpoofing has the guest send frames with its own addresses and with
// forged ones, and watches the node side of the pod's veth (a packet socket
// in the node netns) and the pod netns's own stack (a UDP socket). Only the
// guest's own may reach the node; nothing may reach the pod's stack.
func TestAntiSpoofing(t *testing.T) {
	tp := newTopology(t)
	// Dual stack: the guest may also use this address, and the pod
	// interface's link-local one (fe80::42:aff:fef4:5, from podMAC).
	run(t, "ip", "-n", tp.pod, "addr", "add", "fd00:10:244::5/64", "dev", podIf, "nodad")
	attach(t, tp, nil)
	guest := openTap(t, tp.pod, tapName, podMAC)
	capture := openCapture(t, tp.node, nodeIf)
	const podPort = 7777
	var podStack *net.UDPConn
	if err := inNetns(tp.pod, func() (err error) {
		podStack, err = net.ListenUDP("udp4", &net.UDPAddr{Port: podPort})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer podStack.Close()
	var tapMAC net.HardwareAddr
	if err := inNetns(tp.pod, func() error {
		ifi, err := net.InterfaceByName(tapName)
		if err == nil {
			tapMAC = ifi.HardwareAddr
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}

	var (
		forgedMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x66}
		forgedIP  = netip.MustParseAddr("10.244.0.66")
		gone      = netip.MustParseAddr("10.244.0.99") // nobody's: the node drops it silently
		pod6      = netip.MustParseAddr("fd00:10:244::5")
		podLL     = netip.MustParseAddr("fe80::42:aff:fef4:5")
		gone6     = netip.MustParseAddr("fd00:10:244::99")
		allNodes  = netip.MustParseAddr("ff02::1")
		allMAC    = net.HardwareAddr{0x33, 0x33, 0, 0, 0, 1}
		zero4     = netip.IPv4Unspecified()
		bcast4    = netip.AddrFrom4([4]byte{255, 255, 255, 255})
		ipv4      = func(srcMAC, dstMAC net.HardwareAddr, src, dst netip.Addr, sport, dport uint16) frameFunc {
			return func(marker []byte) []byte {
				return udpFrame(udpPacket{srcMAC: srcMAC, dstMAC: dstMAC,
					src: netip.AddrPortFrom(src, sport), dst: netip.AddrPortFrom(dst, dport), payload: marker})
			}
		}
	)
	frames := []probe{
		{"IPv4", ipv4(podMAC, nodeMAC, podIP, gone, 40000, 9), true},
		{"IPv4, forged source MAC", ipv4(forgedMAC, nodeMAC, podIP, gone, 40000, 9), false},
		{"IPv4, forged source IP", ipv4(podMAC, nodeMAC, forgedIP, gone, 40000, 9), false},
		{"IPv4, forged source IP, to the pod IP via the tap's MAC", ipv4(podMAC, tapMAC, forgedIP, podIP, 40000, podPort), false},
		{"IPv4, forged source IP, broadcast", ipv4(podMAC, bcastMAC, forgedIP, bcast4, 40000, podPort), false},
		{"IPv4 in a VLAN tag", vlanTagged(5, ipv4(podMAC, nodeMAC, podIP, gone, 40000, 9)), false},
		// Shaped like DHCP: goes up to the DHCP server, not to the node.
		{"UDP 68 to 67 from 0.0.0.0", ipv4(podMAC, nodeMAC, zero4, nodeIP, 68, 67), false},
		{"ARP", arpFrame(podMAC, podMAC, podIP, netip.MustParseAddr("10.244.0.201")), true},
		{"ARP probe", arpFrame(podMAC, podMAC, zero4, netip.MustParseAddr("10.244.0.202")), true},
		{"ARP, forged sender MAC", arpFrame(podMAC, forgedMAC, podIP, netip.MustParseAddr("10.244.0.203")), false},
		{"ARP, forged sender IP", arpFrame(podMAC, podMAC, forgedIP, netip.MustParseAddr("10.244.0.204")), false},
		{"ARP, forged Ethernet source", arpFrame(forgedMAC, podMAC, podIP, netip.MustParseAddr("10.244.0.205")), false},
		{"IPv6", udp6Frame(podMAC, nodeMAC, pod6, gone6), true},
		{"IPv6 link-local", udp6Frame(podMAC, allMAC, podLL, allNodes), true},
		{"IPv6 duplicate address detection", dadFrame(podMAC, gone6), true},
		{"IPv6, forged source IP", udp6Frame(podMAC, nodeMAC, netip.MustParseAddr("fd00:10:244::66"), gone6), false},
		{"IPv6, forged link-local source", udp6Frame(podMAC, allMAC, netip.MustParseAddr("fe80::66"), allNodes), false},
		{"IPv6, forged source MAC", udp6Frame(forgedMAC, nodeMAC, pod6, gone6), false},
		{"IPv6 UDP from ::", udp6Frame(podMAC, nodeMAC, netip.IPv6Unspecified(), gone6), false},
		{"another ethertype", rawFrame(podMAC, nodeMAC, 0x88b5), false},
	}
	seen := sendAndWatch(t, guest, capture, frames)

	forged := 0
	for _, f := range frames {
		if !f.allow && !strings.HasPrefix(f.name, "UDP 68") {
			forged++
		}
	}
	podStack.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	buf := make([]byte, 1500)
	if n, from, err := podStack.ReadFromUDP(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("the pod netns's own stack received %q from %v (err %v)", buf[:n], from, err)
	}

	// The forged frames ended at the tap's drop filter, not somewhere later.
	if dropped := dropCount(t, tp.pod); dropped < forged*seen.rounds {
		t.Errorf("the drop filter counted %d frames, want at least %d (%d forged frames, sent %d times)", dropped, forged*seen.rounds, forged, seen.rounds)
	}
	if t.Failed() {
		t.Log(run(t, "tc", "-n", tp.pod, "-s", "filter", "show", "dev", tapName, "ingress"))
	}
}

// TestAntiSpoofingIPv6ND: even from its own addresses the guest may not
// act as a router (router advertisements, redirects) nor claim another
// address (a neighbor advertisement whose target is not the pod's), nor
// hide ICMPv6 behind an extension header the filters cannot look past.
// Its own neighbor advertisements and solicitations and ordinary traffic
// still reach the node.
func TestAntiSpoofingIPv6ND(t *testing.T) {
	tp := newTopology(t)
	run(t, "ip", "-n", tp.pod, "addr", "add", "fd00:10:244::5/64", "dev", podIf, "nodad")
	attach(t, tp, nil)
	guest := openTap(t, tp.pod, tapName, podMAC)
	capture := openCapture(t, tp.node, nodeIf)

	var (
		pod6     = netip.MustParseAddr("fd00:10:244::5")
		podLL    = netip.MustParseAddr("fe80::42:aff:fef4:5")
		gone6    = netip.MustParseAddr("fd00:10:244::99")
		node6    = netip.MustParseAddr("fd00:10:244::1")
		nodeLL   = netip.MustParseAddr("fe80::1")
		allNodes = netip.MustParseAddr("ff02::1")
		allMAC   = net.HardwareAddr{0x33, 0x33, 0, 0, 0, 1}
		target   = func(a netip.Addr) []byte { b := a.As16(); return b[:] }
		// Router advertisement: hop limit, flags, lifetime 1800 s,
		// reachable and retransmit times.
		ra = []byte{134, 0, 0, 0, 64, 0, 0x07, 0x08, 0, 0, 0, 0, 0, 0, 0, 0}
		// Neighbor advertisement, solicited and override, for t.
		na = func(t netip.Addr) []byte { return append([]byte{136, 0, 0, 0, 0x60, 0, 0, 0}, target(t)...) }
		// Redirect: "reach gone6 through nodeLL".
		redirect = append(append([]byte{137, 0, 0, 0, 0, 0, 0, 0}, target(nodeLL)...), target(gone6)...)
		ns       = append([]byte{135, 0, 0, 0, 0, 0, 0, 0}, target(node6)...)
		// A destination options header (8 bytes, a PadN option) and a
		// fragment header (offset 0, more fragments), each followed by
		// ICMPv6; and a hop-by-hop header followed by UDP.
		destOpts = []byte{unix.IPPROTO_ICMPV6, 0, 1, 4, 0, 0, 0, 0}
		fragment = []byte{unix.IPPROTO_ICMPV6, 0, 0, 1, 0, 0, 0, 7}
		hopByHop = []byte{unix.IPPROTO_UDP, 0, 1, 4, 0, 0, 0, 0}
		udp      = []byte{0x9c, 0x40, 0, 9, 0, 0, 0, 0}
	)
	frames := []probe{
		{"IPv6 UDP", udp6Frame(podMAC, nodeMAC, pod6, gone6), true},
		{"neighbor solicitation", icmp6Frame(podMAC, allMAC, pod6, allNodes, unix.IPPROTO_ICMPV6, ns), true},
		{"neighbor advertisement for the pod address", icmp6Frame(podMAC, allMAC, pod6, allNodes, unix.IPPROTO_ICMPV6, na(pod6)), true},
		{"neighbor advertisement for the link-local address", icmp6Frame(podMAC, allMAC, podLL, allNodes, unix.IPPROTO_ICMPV6, na(podLL)), true},
		{"neighbor advertisement for the pod address from the link-local one", icmp6Frame(podMAC, allMAC, podLL, allNodes, unix.IPPROTO_ICMPV6, na(pod6)), true},
		{"router advertisement", icmp6Frame(podMAC, allMAC, podLL, allNodes, unix.IPPROTO_ICMPV6, ra), false},
		{"router advertisement from the global address", icmp6Frame(podMAC, allMAC, pod6, allNodes, unix.IPPROTO_ICMPV6, ra), false},
		{"redirect", icmp6Frame(podMAC, nodeMAC, podLL, nodeLL, unix.IPPROTO_ICMPV6, redirect), false},
		{"neighbor advertisement for another address", icmp6Frame(podMAC, allMAC, pod6, allNodes, unix.IPPROTO_ICMPV6, na(gone6)), false},
		{"neighbor advertisement for the gateway, from the link-local address", icmp6Frame(podMAC, allMAC, podLL, allNodes, unix.IPPROTO_ICMPV6, na(nodeLL)), false},
		{"router advertisement behind destination options", icmp6Frame(podMAC, allMAC, podLL, allNodes, 60, append(append([]byte(nil), destOpts...), ra...)), false},
		{"router advertisement in a fragment", icmp6Frame(podMAC, allMAC, podLL, allNodes, 44, append(append([]byte(nil), fragment...), ra...)), false},
		{"UDP behind hop-by-hop options", icmp6Frame(podMAC, nodeMAC, pod6, gone6, 0, append(append([]byte(nil), hopByHop...), udp...)), false},
	}
	seen := sendAndWatch(t, guest, capture, frames)
	forged := 0
	for _, f := range frames {
		if !f.allow {
			forged++
		}
	}
	if dropped := dropCount(t, tp.pod); dropped < forged*seen.rounds {
		t.Errorf("the drop filters counted %d frames, want at least %d (%d forged frames, sent %d times)", dropped, forged*seen.rounds, forged, seen.rounds)
	}
	if t.Failed() {
		t.Log(run(t, "tc", "-n", tp.pod, "-s", "filter", "show", "dev", tapName, "ingress"))
	}
}

// TestAntiSpoofingNoIPv6: a pod whose interface has no IPv6 address gets no
// IPv6 from the guest, not even link-local or DAD.
func TestAntiSpoofingNoIPv6(t *testing.T) {
	tp := newTopology(t)
	run(t, "ip", "netns", "exec", tp.pod, "sysctl", "-q", "-w", "net.ipv6.conf."+podIf+".disable_ipv6=1")
	attach(t, tp, nil)
	for pref, f := range tcFilters(t, tp.pod, tapName) {
		if f.Protocol == "ipv6" {
			t.Errorf("tap filter pref %d allows IPv6 though the pod has none: %+v", pref, f)
		}
	}
	guest := openTap(t, tp.pod, tapName, podMAC)
	capture := openCapture(t, tp.node, nodeIf)
	allMAC := net.HardwareAddr{0x33, 0x33, 0, 0, 0, 1}
	sendAndWatch(t, guest, capture, []probe{
		{"IPv4", func(marker []byte) []byte {
			return udpFrame(udpPacket{srcMAC: podMAC, dstMAC: nodeMAC,
				src: netip.AddrPortFrom(podIP, 40000), dst: netip.AddrPortFrom(netip.MustParseAddr("10.244.0.99"), 9), payload: marker})
		}, true},
		{"IPv6 link-local", udp6Frame(podMAC, allMAC, netip.MustParseAddr("fe80::42:aff:fef4:5"), netip.MustParseAddr("ff02::1")), false},
		{"IPv6 duplicate address detection", dadFrame(podMAC, netip.MustParseAddr("fe80::42:aff:fef4:5")), false},
	})
}

// probe is a frame the guest sends, and whether it may reach the node.
type probe struct {
	name  string
	frame frameFunc
	allow bool
}

type watched struct {
	seen   map[string]bool
	rounds int // how often the batch went out
}

// sendAndWatch has the guest send every probe, each with a marker of its
// own, and reports a test error for each allowed probe that never reaches
// capture and each forbidden one that does. A frame can be lost on a loaded
// machine, so the batch goes out up to three times until every allowed
// probe has arrived.
func sendAndWatch(t testing.TB, guest *tapGuest, capture *capture, probes []probe) watched {
	t.Helper()
	marker := func(name string) []byte { return []byte("vmpod-test[" + name + "]") }
	w := watched{seen: map[string]bool{}}
	note := func(frame []byte) {
		for _, p := range probes {
			if bytes.Contains(frame, marker(p.name)) {
				w.seen[p.name] = true
			}
		}
	}
	missing := func() int {
		n := 0
		for _, p := range probes {
			if p.allow && !w.seen[p.name] {
				n++
			}
		}
		return n
	}
	for w.rounds < 3 {
		for _, p := range probes {
			guest.send(t, p.frame(marker(p.name)))
		}
		w.rounds++
		capture.collect(t, time.Second, func(frame []byte) bool {
			note(frame)
			return missing() == 0
		})
		if missing() == 0 {
			break
		}
		t.Logf("round %d: %d allowed frames did not reach the node yet", w.rounds, missing())
	}
	// Stragglers: anything forbidden still on its way.
	capture.collect(t, 200*time.Millisecond, func(frame []byte) bool { note(frame); return false })
	for _, p := range probes {
		switch {
		case p.allow && !w.seen[p.name]:
			t.Errorf("%s: never reached the node", p.name)
		case !p.allow && w.seen[p.name]:
			t.Errorf("%s: reached the node", p.name)
		}
	}
	return w
}

// frameFunc builds a frame that carries marker somewhere in it.
type frameFunc func(marker []byte) []byte

func ethHeader(srcMAC, dstMAC net.HardwareAddr, ethertype uint16) []byte {
	b := make([]byte, 14)
	copy(b[0:6], dstMAC)
	copy(b[6:12], srcMAC)
	binary.BigEndian.PutUint16(b[12:], ethertype)
	return b
}

func rawFrame(srcMAC, dstMAC net.HardwareAddr, ethertype uint16) frameFunc {
	return func(marker []byte) []byte { return append(ethHeader(srcMAC, dstMAC, ethertype), marker...) }
}

// vlanTagged puts an 802.1Q tag with vid after inner's MAC addresses.
func vlanTagged(vid uint16, inner frameFunc) frameFunc {
	return func(marker []byte) []byte {
		f := inner(marker)
		tag := binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(nil, unix.ETH_P_8021Q), vid)
		return append(append(append([]byte(nil), f[:12]...), tag...), f[12:]...)
	}
}

// arpFrame is an ARP request from the Ethernet source ethSrc with sender
// sha/spa for tpa. The marker rides behind the ARP body, where padding goes.
func arpFrame(ethSrc, sha net.HardwareAddr, spa, tpa netip.Addr) frameFunc {
	return func(marker []byte) []byte {
		b := ethHeader(ethSrc, bcastMAC, unix.ETH_P_ARP)
		b = append(b, 0, 1, 0x08, 0x00, 6, 4, 0, 1) // Ethernet, IPv4, request
		b = append(b, sha...)
		b = append(b, spa.AsSlice()...)
		b = append(b, 0, 0, 0, 0, 0, 0)
		b = append(b, tpa.AsSlice()...)
		return append(b, marker...)
	}
}

func ipv6Frame(srcMAC, dstMAC net.HardwareAddr, src, dst netip.Addr, next byte, payload []byte) []byte {
	b := ethHeader(srcMAC, dstMAC, unix.ETH_P_IPV6)
	ip := make([]byte, 40)
	ip[0] = 0x60
	binary.BigEndian.PutUint16(ip[4:], uint16(len(payload)))
	ip[6] = next
	ip[7] = 64 // hop limit
	copy(ip[8:24], src.AsSlice())
	copy(ip[24:40], dst.AsSlice())
	return append(append(b, ip...), payload...)
}

// udp6Frame carries the marker in a UDP datagram to port 9. Its checksum is
// left 0, which IPv6 forbids; the packet socket that watches sees the frame
// before anything checks.
func udp6Frame(srcMAC, dstMAC net.HardwareAddr, src, dst netip.Addr) frameFunc {
	return func(marker []byte) []byte {
		udp := make([]byte, 8, 8+len(marker))
		binary.BigEndian.PutUint16(udp[0:], 40000)
		binary.BigEndian.PutUint16(udp[2:], 9)
		binary.BigEndian.PutUint16(udp[4:], uint16(8+len(marker)))
		return ipv6Frame(srcMAC, dstMAC, src, dst, unix.IPPROTO_UDP, append(udp, marker...))
	}
}

// dadFrame is a neighbor solicitation from :: for target, to its
// solicited-node group, as duplicate address detection sends it.
func dadFrame(srcMAC net.HardwareAddr, target netip.Addr) frameFunc {
	return func(marker []byte) []byte {
		t := target.As16()
		group := netip.AddrFrom16([16]byte{0xff, 0x02, 11: 1, 12: 0xff, 13: t[13], 14: t[14], 15: t[15]})
		groupMAC := net.HardwareAddr{0x33, 0x33, 0xff, t[13], t[14], t[15]}
		ns := append([]byte{135, 0, 0, 0, 0, 0, 0, 0}, t[:]...)
		return ipv6Frame(srcMAC, groupMAC, netip.IPv6Unspecified(), group, unix.IPPROTO_ICMPV6, append(ns, marker...))
	}
}

// icmp6Frame is an IPv6 packet whose next header is next and whose payload
// is body (ICMPv6 with its checksum left 0, or extension headers first)
// followed by the marker.
func icmp6Frame(srcMAC, dstMAC net.HardwareAddr, src, dst netip.Addr, next byte, body []byte) frameFunc {
	return func(marker []byte) []byte {
		return ipv6Frame(srcMAC, dstMAC, src, dst, next, append(append([]byte(nil), body...), marker...))
	}
}

// capture is a packet socket on one interface that sees every frame the
// interface receives (not those it sends).
type capture struct{ f *os.File }

func openCapture(t testing.TB, ns, ifname string) *capture {
	t.Helper()
	proto := int(htons(unix.ETH_P_ALL))
	var f *os.File
	err := inNetns(ns, func() error {
		ifi, err := net.InterfaceByName(ifname)
		if err != nil {
			return err
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, proto)
		if err != nil {
			return err
		}
		if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1); err != nil {
			unix.Close(fd)
			return err
		}
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: uint16(proto), Ifindex: ifi.Index}); err != nil {
			unix.Close(fd)
			return err
		}
		// Non-blocking, so os.File polls it and read deadlines work.
		f = os.NewFile(uintptr(fd), "capture "+ifname)
		return nil
	})
	if err != nil {
		t.Fatalf("packet socket on %s: %v", ifname, err)
	}
	t.Cleanup(func() { f.Close() })
	return &capture{f: f}
}

// collect hands each frame received to done until it returns true or wait
// has passed.
func (c *capture) collect(t testing.TB, wait time.Duration, done func(frame []byte) bool) {
	t.Helper()
	if err := c.f.SetReadDeadline(time.Now().Add(wait)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 65536)
	for {
		n, err := c.f.Read(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return
		}
		if err != nil {
			t.Fatalf("capture: %v", err)
		}
		if done(buf[:n]) {
			return
		}
	}
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// dropCount is how many frames the tap's drop filters have taken, from
// tc's statistics of their actions: the mirred redirects to a device that
// is gone (the last filter, and the IPv6 ones before the allow list).
func dropCount(t testing.TB, ns string) int {
	t.Helper()
	out := run(t, "tc", "-n", ns, "-s", "-j", "filter", "show", "dev", tapName, "ingress")
	var filters []struct {
		Pref    int `json:"pref"`
		Options struct {
			Actions []struct {
				Kind  string `json:"kind"`
				ToDev string `json:"to_dev"`
				Stats struct {
					Packets int `json:"packets"`
				} `json:"stats"`
			} `json:"actions"`
		} `json:"options"`
	}
	if err := json.Unmarshal([]byte(out), &filters); err != nil {
		t.Fatalf("tc -j filter show: %v\n%s", err, out)
	}
	// tc lists each filter as several entries with the same pref.
	n, lastPref, drops := 0, -1, map[int]bool{}
	for _, f := range filters {
		for _, a := range f.Options.Actions {
			if a.Kind == "mirred" && a.ToDev == "*" {
				n += a.Stats.Packets
				drops[f.Pref] = true
			}
		}
		lastPref = max(lastPref, f.Pref)
	}
	if !drops[lastPref] {
		t.Fatalf("the last filter on %s (pref %d) is not a drop (a redirect to a device that is gone):\n%s", tapName, lastPref, out)
	}
	return n
}
