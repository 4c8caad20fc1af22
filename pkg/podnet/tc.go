package podnet

import (
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// tc objects Attach installs. Only u32 and mirred are used: matchall,
// flower, gact (the usual "pass" and "drop") and police are absent from
// some kernels (the 6.18 one these tests were written on lacks all four).
//
// On the tap the filters form an allow list, tried in priority order; the
// first that matches ends classification. Every allow filter insists on the
// guest's MAC as the Ethernet source. What none allows meets the last filter,
// which drops it (see dropFilter). A few filters before the IPv6 allow list
// drop what a pod address may not send either (see guestDenyFilters).
const (
	// The guest's DHCP client traffic, from 0.0.0.0 (before it has a
	// lease) or from the pod IP (rebinding), passed up to the DHCP server.
	prioDHCPUnspec = 1
	prioDHCPPodIP  = 2
	// IPv4 from the pod IP, redirected out of the pod interface.
	prioIPv4 = 3
	// ARP whose sender is the guest (MAC and pod IP), or an ARP probe
	// (sender IP 0.0.0.0, RFC 5227), redirected.
	prioARP      = 4
	prioARPProbe = 5
	// IPv6 duplicate address detection: a neighbor solicitation from ::.
	prioIPv6DAD = 6
	// IPv6 with an extension header, one filter per kind: dropped.
	prioIPv6ExtHdr = 7
	// ICMPv6 router advertisements and redirects: dropped.
	prioIPv6RA       = prioIPv6ExtHdr + len(ipv6ExtHdrs)
	prioIPv6Redirect = prioIPv6RA + 1
	// ICMPv6 neighbor advertisements from a pod IPv6 address for a pod
	// IPv6 address, one filter per (source, target) pair, redirected;
	// then every other neighbor advertisement, dropped.
	prioIPv6NA     = 100
	prioIPv6NADrop = prioIPv6NA + maxIPv6*maxIPv6
	// IPv6 from one of the pod interface's IPv6 addresses, one filter each.
	prioIPv6 = prioIPv6NADrop + 1
	// Everything else from the guest.
	prioDrop = prioIPv6 + maxIPv6

	// On the pod interface: everything to the tap.
	prioRedirect = 2
)

// maxIPv6 bounds the IPv6 addresses the guest may use as sources (one
// filter each, and one per pair for neighbor advertisements).
const maxIPv6 = 32

// ipv6ExtHdrs are the IPv6 extension headers (IANA's "IPv6 Extension Header
// Types", RFC 7045) the guest may not send: hop-by-hop options, routing,
// fragment, AH, destination options, mobility, HIP, shim6 and the two
// experimental values. u32 reads fixed offsets, so an ICMPv6 type is
// checkable only right behind the fixed header; a router advertisement
// behind a destination options header, or split into fragments, would
// slip past the checks below. ESP (50) is not among them: nothing after
// it is readable without the key. See doc.go for what this costs a guest.
var ipv6ExtHdrs = [...]byte{0, 43, 44, 51, 60, 135, 139, 140, 253, 254}

// ICMPv6 types the tap's filters look at (RFC 4861).
const (
	icmp6RouterAdvert   = 134
	icmp6NeighborSolic  = 135
	icmp6NeighborAdvert = 136
	icmp6Redirect       = 137
)

var ingressParent = netlink.MakeHandle(0xffff, 0)

func ingressQdisc(link int) *netlink.Ingress {
	return &netlink.Ingress{QdiscAttrs: netlink.QdiscAttrs{
		LinkIndex: link,
		Parent:    netlink.HANDLE_INGRESS,
		Handle:    ingressParent,
	}}
}

// u32Sel collects byte comparisons and packs them into the 32-bit words u32
// compares. Offsets count from the network header, where an ingress hook
// sees the packet start; the Ethernet header lies before it (the source MAC
// at -8). Words are aligned to 4 bytes from there, as tc(8) packs them.
type u32Sel map[int32]netlink.TcU32Key

// eq requires the bytes at off to be want.
func (s u32Sel) eq(off int, want []byte) u32Sel {
	for i, b := range want {
		s.masked(off+i, b, 0xff)
	}
	return s
}

// masked requires the byte at off, under mask, to be val.
func (s u32Sel) masked(off int, val, mask byte) u32Sel {
	word := int32(off) &^ 3 // rounds down for negative offsets too
	shift := 8 * (3 - (int32(off) - word))
	k := s[word]
	k.Off = word
	k.Mask |= uint32(mask) << shift
	k.Val |= uint32(val&mask) << shift
	s[word] = k
	return s
}

// keys are the words in offset order. Values are in host order; netlink
// converts them.
func (s u32Sel) keys() []netlink.TcU32Key {
	keys := make([]netlink.TcU32Key, 0, len(s))
	for _, k := range s {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].Off < keys[j].Off })
	return keys
}

// Offsets from the network header.
const (
	offEthSrc  = -8 // Ethernet source MAC
	offIPv4Src = 12
	offIPv6Src = 8
	// With no extension header: the next header field, the ICMPv6 type
	// and a neighbor advertisement's target address.
	offIPv6Next     = 6
	offICMPv6Type   = 40
	offIPv6NATarget = 48
)

func u32Filter(link, prio int, proto uint16, sel u32Sel, actions ...netlink.Action) *netlink.U32 {
	return &netlink.U32{
		FilterAttrs: netlink.FilterAttrs{
			LinkIndex: link,
			Parent:    ingressParent,
			Priority:  uint16(prio),
			Protocol:  proto,
		},
		Sel:     &netlink.TcU32Sel{Flags: netlink.TC_U32_TERMINAL, Keys: sel.keys()},
		Actions: actions,
	}
}

// redirectAll sends every frame arriving on from out of to, as if to had
// transmitted it: the u32 selector with one all-zero key matches anything.
func redirectAll(from, to int) *netlink.U32 {
	return u32Filter(from, prioRedirect, unix.ETH_P_ALL, u32Sel{0: {}}, netlink.NewMirredAction(to))
}

// guestFilters is the tap's allow list (all but the final drop), for the
// guest of p on the tap with index tap, redirecting to the pod interface
// with index pod.
//
// A frame with a VLAN tag never matches: the kernel strips the tag before
// the ingress hook, and tc then classifies the frame as protocol 802.1Q,
// for which there is no allow filter.
func guestFilters(p Pod, tap, pod int) []*netlink.U32 {
	mac := []byte(p.MAC)
	podIP := p.Addr.Addr().AsSlice()
	zero4 := netip.IPv4Unspecified().AsSlice()
	fromGuest := func() u32Sel { return u32Sel{}.eq(offEthSrc, mac) }
	toPod := func() netlink.Action { return netlink.NewMirredAction(pod) }

	// DHCP: IPv4 without options (DHCP clients send none), not a fragment
	// (a fragment could not hold a whole DHCP message), UDP 68 -> 67. No
	// action: classification ends with TC_ACT_OK and the frame goes up the
	// tap's own stack, to the DHCP server's socket.
	dhcp := func(src []byte) u32Sel {
		return fromGuest().
			masked(0, 0x05, 0x0f).               // IHL 5
			masked(6, 0, 0x3f).eq(7, []byte{0}). // MF clear, offset 0
			eq(9, []byte{unix.IPPROTO_UDP}).
			eq(offIPv4Src, src).
			eq(20, []byte{0, 68, 0, 67}) // UDP ports
	}
	// ARP for Ethernet and IPv4 (htype 1, ptype 0x0800, hlen 6, plen 4)
	// whose sender hardware address is the guest's and whose sender IP is
	// spa.
	arp := func(spa []byte) u32Sel {
		return fromGuest().eq(0, []byte{0, 1, 0x08, 0x00, 6, 4}).eq(8, mac).eq(14, spa)
	}

	fs := []*netlink.U32{
		u32Filter(tap, prioDHCPUnspec, unix.ETH_P_IP, dhcp(zero4)),
		u32Filter(tap, prioDHCPPodIP, unix.ETH_P_IP, dhcp(podIP)),
		u32Filter(tap, prioIPv4, unix.ETH_P_IP, fromGuest().eq(offIPv4Src, podIP), toPod()),
		u32Filter(tap, prioARP, unix.ETH_P_ARP, arp(podIP), toPod()),
		u32Filter(tap, prioARPProbe, unix.ETH_P_ARP, arp(zero4), toPod()),
	}
	if len(p.IPv6) == 0 {
		return fs
	}
	// Duplicate address detection: version 6, next header ICMPv6 (no
	// extension headers), source ::, ICMPv6 type 135 (neighbor
	// solicitation).
	v6 := func() u32Sel { return fromGuest().masked(0, 0x60, 0xf0) }
	icmp6 := func(typ byte) u32Sel {
		return v6().eq(offIPv6Next, []byte{unix.IPPROTO_ICMPV6}).eq(offICMPv6Type, []byte{typ})
	}
	dad := icmp6(icmp6NeighborSolic).eq(offIPv6Src, netip.IPv6Unspecified().AsSlice())
	fs = append(fs, u32Filter(tap, prioIPv6DAD, unix.ETH_P_IPV6, dad, toPod()))
	// A neighbor advertisement may name only the pod's own addresses as
	// its target (else the guest could take over any address on the
	// link); its source is checked as for any packet.
	for i, src := range p.IPv6 {
		for j, target := range p.IPv6 {
			sel := icmp6(icmp6NeighborAdvert).eq(offIPv6Src, src.AsSlice()).eq(offIPv6NATarget, target.AsSlice())
			fs = append(fs, u32Filter(tap, prioIPv6NA+i*maxIPv6+j, unix.ETH_P_IPV6, sel, toPod()))
		}
	}
	for i, a := range p.IPv6 {
		sel := v6().eq(offIPv6Src, a.AsSlice())
		fs = append(fs, u32Filter(tap, prioIPv6+i, unix.ETH_P_IPV6, sel, toPod()))
	}
	return fs
}

// guestDenyFilters drop, by redirecting to sink (see dropFilter), the IPv6
// a guest may not send even from its own address: anything with an
// extension header, router advertisements, redirects, and neighbor
// advertisements that guestFilters' pairs did not take. They sit between
// the DAD filter and the IPv6 allow list. A pod without IPv6 has none:
// the final drop takes all of its guest's IPv6.
func guestDenyFilters(p Pod, tap, sink int) []*netlink.U32 {
	if len(p.IPv6) == 0 {
		return nil
	}
	v6 := func() u32Sel { return u32Sel{}.masked(0, 0x60, 0xf0) }
	icmp6 := func(typ byte) u32Sel {
		return v6().eq(offIPv6Next, []byte{unix.IPPROTO_ICMPV6}).eq(offICMPv6Type, []byte{typ})
	}
	drop := func(prio int, sel u32Sel) *netlink.U32 {
		return u32Filter(tap, prio, unix.ETH_P_IPV6, sel, netlink.NewMirredAction(sink))
	}
	var fs []*netlink.U32
	for i, next := range ipv6ExtHdrs {
		fs = append(fs, drop(prioIPv6ExtHdr+i, v6().eq(offIPv6Next, []byte{next})))
	}
	return append(fs,
		drop(prioIPv6RA, icmp6(icmp6RouterAdvert)),
		drop(prioIPv6Redirect, icmp6(icmp6Redirect)),
		drop(prioIPv6NADrop, icmp6(icmp6NeighborAdvert)),
	)
}

// dropFilter matches every frame on the tap that no allow filter took and
// redirects it to sink. The caller removes sink afterwards, and that is what
// makes this a drop: mirred forgets a removed device (its NETDEV_UNREGISTER
// notifier clears the action's device), and a redirect with no device
// consumes the frame and counts it as an overlimit of the action (the
// kernel may log "tc mirred: target device is gone", once per boot). Seen
// on 6.18; TestAntiSpoofing checks it on whatever kernel runs it. gact's
// "drop" would say it plainly, but gact, like police, is missing from some
// kernels; mirred is the one action vmpod needs anyway.
func dropFilter(tap, sink int) *netlink.U32 {
	return u32Filter(tap, prioDrop, unix.ETH_P_ALL, u32Sel{0: {}}, netlink.NewMirredAction(sink))
}

// addDropFilters installs dropFilter and guestDenyFilters with a throwaway
// tap as the sink, then removes the tap. The tap is not persistent: it lives as long as its file
// descriptor, so not even a crash here can leave it behind.
func addDropFilters(h *netlink.Handle, p Pod, tap int, tapName string) error {
	sink := &netlink.Tuntap{
		LinkAttrs:  netlink.LinkAttrs{Name: "vmpdrop%d"},
		Mode:       netlink.TUNTAP_MODE_TAP,
		Flags:      netlink.TUNTAP_NO_PI,
		NonPersist: true,
		Queues:     1,
	}
	if err := h.LinkAdd(sink); err != nil {
		return fmt.Errorf("drop filter on %q: throwaway tap: %w", tapName, err)
	}
	sinkIndex := sink.Attrs().Index
	var err error
	for _, f := range append([]*netlink.U32{dropFilter(tap, sinkIndex)}, guestDenyFilters(p, tap, sinkIndex)...) {
		if err = addFilter(h, f, tapName); err != nil {
			break
		}
	}
	for _, f := range sink.Fds {
		f.Close()
	}
	if err != nil {
		return err
	}
	// Closing the last descriptor unregisters the tap before close returns,
	// but ours may not be the last: a child this process forks at that
	// moment holds a copy of every descriptor until it execs (close-on-exec
	// acts only then), the likely holder when test/e2e TestStorm saw the
	// tap outlive the close with 5 VMs starting at once in vm-runtime cri.
	// So wait, bounded, for the tap to go.
	for deadline := time.Now().Add(sinkGoneTimeout); ; time.Sleep(10 * time.Millisecond) {
		l, err := h.LinkByIndex(sinkIndex)
		if err != nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("drop filter on %q: the throwaway tap %q (index %d) is still there %v after its descriptor closed", tapName, l.Attrs().Name, sinkIndex, sinkGoneTimeout)
		}
	}
}

// sinkGoneTimeout bounds the wait for the throwaway tap to go once its
// descriptor is closed: a forked child's copy lasts until its exec.
const sinkGoneTimeout = 5 * time.Second

// kernelHint names the kernel feature behind an error from adding a tc
// object. A kernel with the feature as a module loads it by itself
// (request_module); ENOENT or EOPNOTSUPP means it could not.
func kernelHint(err error, what, need string) error {
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EOPNOTSUPP) {
		return fmt.Errorf("%s: %w (the kernel needs %s)", what, err, need)
	}
	return fmt.Errorf("%s: %w", what, err)
}

func addIngress(h *netlink.Handle, link int, name string) error {
	err := h.QdiscAdd(ingressQdisc(link))
	if errors.Is(err, unix.EEXIST) {
		// An existing ingress or clsact qdisc belongs to someone else
		// (a CNI plugin); its filters would run alongside ours in an
		// order we do not control.
		return fmt.Errorf("ingress qdisc on %q: %w: it already has one (ingress or clsact); vmpod needs that hook for itself", name, err)
	}
	if err != nil {
		return kernelHint(err, fmt.Sprintf("ingress qdisc on %q", name), "CONFIG_NET_SCH_INGRESS, module sch_ingress")
	}
	return nil
}

func addFilter(h *netlink.Handle, f *netlink.U32, name string) error {
	err := h.FilterAdd(f)
	if err == nil {
		return nil
	}
	what := fmt.Sprintf("u32 filter (prio %d) on %q", f.Priority, name)
	if len(f.Actions) > 0 {
		return kernelHint(err, what, "CONFIG_NET_CLS_U32 and CONFIG_NET_ACT_MIRRED, modules cls_u32 and act_mirred")
	}
	return kernelHint(err, what, "CONFIG_NET_CLS_U32, module cls_u32")
}

// delIngress removes an ingress qdisc and with it its filters. Gone already
// (or the link gone) is success: Close must be idempotent and the pod's
// interface may be torn down before the pod's VM.
func delIngress(h *netlink.Handle, link int) error {
	err := h.QdiscDel(ingressQdisc(link))
	if err == nil || errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENODEV) {
		return nil
	}
	return err
}
