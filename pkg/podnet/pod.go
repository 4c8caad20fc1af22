package podnet

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Pod is the pod interface as CNI left it, plus what the guest is told
// besides (DNS, hostname). Inspect fills the interface part; the caller adds
// DNS (from ResolvConf) and Hostname (the pod name).
type Pod struct {
	// Interface is the pod interface's name, usually eth0.
	Interface string
	// MAC is the pod interface's address; the guest NIC must use it.
	MAC net.HardwareAddr
	MTU int
	// Addr is the pod IP with its prefix length, e.g. 10.244.0.5/24.
	Addr netip.Prefix
	// Gateway is the default route's next hop. It may lie outside Addr's
	// prefix (a /32 pod IP with an on-link gateway, as Calico does).
	Gateway netip.Addr
	// Routes are the interface's IPv4 routes other than the default route
	// and the kernel's route to Addr's own prefix.
	Routes []Route
	// PrefixOffLink says that the pod netns does not send to the other
	// addresses of Addr's prefix straight onto the link: the kernel's
	// connected route for the prefix is gone, or a route via a gateway
	// comes before it. CNI's ptp plugin (and so kind's kindnetd) does this:
	// it replaces the connected route with one via the gateway, so every
	// other pod, even one on the same node, is reached through the node.
	// The guest then gets the pod IP as a /32 and the pod's routes (see
	// guestAddr), so that it routes as the pod netns does. Never set for a
	// /32 Addr, which has no other addresses.
	PrefixOffLink bool
	// IPv6 are the interface's IPv6 addresses, link-local ones included
	// (the kernel gives an interface with IPv6 on one, derived from the
	// MAC). They are the only IPv6 sources the guest may use; none means no
	// IPv6 from the guest at all. podnet does not hand them to the guest
	// (no DHCPv6, no router advertisements): a guest that should use a
	// global one learns it another way (cloud-init network config).
	IPv6 []netip.Addr

	DNS      DNS
	Hostname string
}

// Route is one IPv4 route the guest should have too. Via is invalid (the
// zero Addr) for a route straight onto the link.
type Route struct {
	Dst netip.Prefix
	Via netip.Addr
}

// SetMAC gives the interface ifname of the current network namespace the
// Ethernet address mac, before Inspect reads it: a VM restored from a
// checkpoint keeps the MAC its guest had, and the pod interface takes it
// so that the guest owns the pod's identity on the network as a booted
// one does (Wire lets through only frames from the pod interface's MAC).
func SetMAC(ifname string, mac net.HardwareAddr) error {
	if len(mac) != 6 {
		return fmt.Errorf("pod interface %q: %q is not an Ethernet address", ifname, mac)
	}
	return here(func(h *netlink.Handle) error {
		link, err := h.LinkByName(ifname)
		if err != nil {
			return fmt.Errorf("pod interface %q: %w", ifname, err)
		}
		if err := h.LinkSetHardwareAddr(link, mac); err != nil {
			return fmt.Errorf("pod interface %q: set MAC %s: %w", ifname, mac, err)
		}
		return nil
	})
}

// Inspect reads the interface ifname of the current network namespace (see
// the package comment). It fails, naming the interface, when the interface
// has no IPv4 address or no IPv4 default route: there would be nothing to
// hand the guest.
func Inspect(ifname string) (Pod, error) {
	// All look-ups from one thread, so one namespace (see the package comment).
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	link, err := netlink.LinkByName(ifname)
	if err != nil {
		return Pod{}, fmt.Errorf("pod interface %q: %w", ifname, err)
	}
	attrs := link.Attrs()
	p := Pod{
		Interface: ifname,
		MAC:       append(net.HardwareAddr(nil), attrs.HardwareAddr...),
		MTU:       attrs.MTU,
	}
	if len(p.MAC) != 6 {
		return Pod{}, fmt.Errorf("pod interface %q: not an Ethernet interface (hardware address %q)", ifname, attrs.HardwareAddr)
	}

	addrs, err := dump(func() ([]netlink.Addr, error) { return netlink.AddrList(link, unix.AF_INET) })
	if err != nil {
		return Pod{}, fmt.Errorf("pod interface %q: listing addresses: %w", ifname, err)
	}
	if p.Addr, err = podAddr(addrs); err != nil {
		return Pod{}, fmt.Errorf("pod interface %q: %w", ifname, err)
	}

	addrs6, err := dump(func() ([]netlink.Addr, error) { return netlink.AddrList(link, unix.AF_INET6) })
	if err != nil {
		return Pod{}, fmt.Errorf("pod interface %q: listing IPv6 addresses: %w", ifname, err)
	}
	p.IPv6 = podAddrs6(addrs6)

	filter := &netlink.Route{LinkIndex: attrs.Index, Table: unix.RT_TABLE_MAIN}
	routes, err := dump(func() ([]netlink.Route, error) {
		return netlink.RouteListFiltered(unix.AF_INET, filter, netlink.RT_FILTER_OIF|netlink.RT_FILTER_TABLE)
	})
	if err != nil {
		return Pod{}, fmt.Errorf("pod interface %q: listing routes: %w", ifname, err)
	}
	if p.Gateway, p.Routes, err = podRoutes(routes, p.Addr); err != nil {
		return Pod{}, fmt.Errorf("pod interface %q: %w", ifname, err)
	}
	p.PrefixOffLink = !prefixOnLink(routes, p.Addr)
	return p, nil
}

// guestAddr is the address and prefix the guest is given: the pod's, or
// the pod IP alone when the pod netns does not treat its prefix as on the
// link (PrefixOffLink). A guest that got the pod's /24 there would send to
// its neighbours on the link, where nobody answers its ARP (the node side
// of a ptp veth holds only the gateway's address and does no proxy ARP),
// whatever its routes said: the kernel's connected route that comes with
// its address stays ahead of any route a DHCP client adds for the same
// prefix.
func (p Pod) guestAddr() netip.Prefix {
	if p.PrefixOffLink {
		return netip.PrefixFrom(p.Addr.Addr(), 32)
	}
	return p.Addr
}

// podAddr picks the first global IPv4 address (the kernel lists the primary
// address first; a secondary one is not what CNI assigned).
func podAddr(addrs []netlink.Addr) (netip.Prefix, error) {
	for _, a := range addrs {
		if a.Scope != unix.RT_SCOPE_UNIVERSE || a.Flags&unix.IFA_F_SECONDARY != 0 {
			continue
		}
		ip, ok := netip.AddrFromSlice(a.IP.To4())
		if !ok {
			continue
		}
		ones, _ := a.Mask.Size()
		return netip.PrefixFrom(ip, ones), nil
	}
	return netip.Prefix{}, errors.New("no IPv4 address (vmpod needs the pod's IPv4 address to hand to the guest)")
}

// podAddrs6 is every IPv6 address on the interface except one that failed
// duplicate address detection (someone else on the link has it).
func podAddrs6(addrs []netlink.Addr) []netip.Addr {
	var out []netip.Addr
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok || !ip.Is6() || ip.Is4In6() || a.Flags&unix.IFA_F_DADFAILED != 0 {
			continue
		}
		out = append(out, ip)
	}
	return out
}

// podRoutes splits the interface's routes into the default gateway and the
// rest, leaving out the kernel's route for the address's own prefix (the
// guest derives that one from the prefix length itself).
func podRoutes(routes []netlink.Route, addr netip.Prefix) (netip.Addr, []Route, error) {
	var gw netip.Addr
	var others []Route
	for _, r := range routes {
		if r.Type != unix.RTN_UNICAST {
			continue
		}
		dst, ok := routeDst(r)
		if !ok {
			continue
		}
		via, _ := netip.AddrFromSlice(r.Gw.To4())
		switch {
		case dst.Bits() == 0:
			if via.IsValid() && !gw.IsValid() {
				gw = via
			}
		case r.Protocol == unix.RTPROT_KERNEL && dst == addr.Masked():
			// The connected route that comes with the address.
		default:
			others = append(others, Route{Dst: dst, Via: via})
		}
	}
	if !gw.IsValid() {
		return netip.Addr{}, nil, errors.New("no IPv4 default route with a gateway (vmpod hands the guest the pod's default gateway)")
	}
	return gw, others, nil
}

// prefixOnLink reports whether the pod netns sends to the other addresses
// of addr's prefix straight onto the link: whether, of its routes for
// exactly that prefix, the one the kernel uses (the lowest metric) has no
// gateway. CNI's bridge plugin leaves the kernel's connected route, which
// has none; the ptp plugin deletes it and adds one via the gateway. A
// longer route (a /32 to the gateway, say) does not count: it covers only
// part of the prefix.
func prefixOnLink(routes []netlink.Route, addr netip.Prefix) bool {
	if addr.Bits() == 32 {
		return true
	}
	var best *netlink.Route
	for i, r := range routes {
		if r.Type != unix.RTN_UNICAST {
			continue
		}
		if dst, ok := routeDst(r); !ok || dst != addr.Masked() {
			continue
		}
		if best == nil || r.Priority < best.Priority {
			best = &routes[i]
		}
	}
	return best != nil && best.Gw == nil && len(best.MultiPath) == 0
}

// routeDst is an IPv4 route's destination, 0.0.0.0/0 for the default route.
func routeDst(r netlink.Route) (netip.Prefix, bool) {
	if r.Dst == nil {
		return netip.PrefixFrom(netip.IPv4Unspecified(), 0), true
	}
	ip, ok := netip.AddrFromSlice(r.Dst.IP.To4())
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := r.Dst.Mask.Size()
	return netip.PrefixFrom(ip, ones), true
}

// dump retries a netlink dump the kernel interrupted because the table
// changed under it (netlink.ErrDumpInterrupted comes with partial results).
func dump[T any](list func() ([]T, error)) ([]T, error) {
	var err error
	for range 5 {
		var out []T
		out, err = list()
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			return out, err
		}
	}
	return nil, err
}
