// Package podnet gives a VM the pod's network identity.
//
// CNI sets up the pod's network namespace as for any pod: one interface
// (eth0) with the pod IP, a default route and a MAC. podnet reads that
// (Inspect), puts a tap for the guest's NIC next to it, joins the two with
// tc and answers the guest's DHCP with exactly the pod's address, gateway,
// DNS and MTU (Wire; Attach makes the tap in the pod's namespace and wires
// it). A runtime makes the tap in the node's namespace instead (CreateTap),
// where its hypervisor opens it, and moves it into the pod's (MoveTap)
// before wiring it: no hypervisor thread ever runs in a pod's namespace.
// The guest NIC carries the pod interface's MAC, so to everything outside
// the pod the guest is the pod.
//
//	node ── eth0 ingress ── u32 match-all, mirred redirect ──► tap egress ──► guest
//
//	        tap ingress, u32 filters tried in priority order ◄── guest
//	        (each requires the pod's MAC as the Ethernet source)
//	  1-2   UDP 68 -> 67 from 0.0.0.0 or the pod IP, no action:
//	        up the tap's stack ──► DHCP server (socket bound to the tap)
//	  3-6   IPv4 from the pod IP, ARP from the pod's MAC and IP (or 0.0.0.0),
//	        IPv6 neighbor solicitations from :: (DAD), mirred redirect:
//	        ──► eth0 egress ──► node
//	  7-18  IPv6 with an extension header, router advertisements,
//	        redirects: dropped (mirred redirect to a removed device)
//	  100-  neighbor advertisements from a pod IPv6 address for a pod
//	        IPv6 address, redirected; 1124 any other one: dropped
//	  1125- IPv6 from a pod IPv6 address, redirected
//	  1157  anything else: dropped
//
// The guest is attacker-controlled. From the tap the node receives only
// frames with the pod's MAC as the Ethernet source and the pod's addresses
// as the IP (or ARP sender) source: IPv4 from the pod IP; ARP whose sender
// is the pod's MAC and the pod IP (or 0.0.0.0, an ARP probe); IPv6 from one
// of the pod interface's IPv6 addresses (Pod.IPv6, link-local included),
// and neighbor solicitations from :: for duplicate address detection. A pod
// whose interface has no IPv6 address (IPv6 off in its netns) gets no IPv6
// from the guest at all; an IPv4-only pod whose interface has just the
// kernel's link-local address lets the guest use that one, as an ordinary
// container in the pod could. (That link-local address is the EUI-64 one
// from the MAC, which the guest shares: a guest that makes its link-local
// address another way, as NetworkManager's default "stable-privacy" does,
// must be told to use eui64.) Every other frame is dropped: other
// ethertypes, and VLAN-tagged frames (tc sees them as protocol 802.1Q).
//
// Even from its own IPv6 addresses the guest may not act as a router or
// claim someone else's address: router advertisements (ICMPv6 134) and
// redirects (137) are dropped, and a neighbor advertisement (136) passes
// only when its target is one of the pod's IPv6 addresses. u32 compares
// bytes at fixed offsets, so it can read the ICMPv6 type only right behind
// the 40-byte IPv6 header; a router advertisement behind a destination
// options header, or in fragments, would not be seen. So IPv6 from the
// guest with any extension header (hop-by-hop, routing, fragment, AH,
// destination options, mobility, HIP, shim6, the experimental 253 and 254)
// is dropped, whatever follows it. What that costs a guest: its MLD
// reports (they carry a hop-by-hop router alert) do not leave the pod,
// which is harmless because the pod interface holds the same addresses and
// reports the same solicited-node groups itself; and it cannot send IPv6
// fragments, so a UDP datagram larger than the MTU over IPv6 is lost (TCP
// and path MTU discovery are unaffected). ESP passes: nothing after it is
// readable without the key. Allowing fragments would need the fragment
// header's next header checked and ND fragments refused (RFC 6980), and
// no receiver can be trusted to drop a fragmented advertisement itself.
// The pod netns's own stack gets only DHCP client messages (see Attach).
//
// Dropping without gact: the last filter on the tap redirects with mirred to
// a throwaway tap that Attach removes right away; mirred drops what it
// cannot deliver to a removed device (see dropFilter). The obvious
// alternative, redirecting only what is allowed and letting the rest go up
// the tap's stack (the tap has no address), is not safe: the pod netns
// holds the pod IP, so that stack delivers a forged packet to the pod
// netns's own sockets, learns ARP entries from it, and with ip_forward on
// would route it out of the pod interface with its forged source.
//
// Namespaces: every function works in the network namespace of the calling
// OS thread. The shim enters the pod's namespace for its whole process before
// any other thread starts, so it needs nothing more. A caller that switched a
// single thread with setns (tests do) must hold runtime.LockOSThread across
// Inspect and Attach. Attach keeps a netlink handle and a socket that were
// opened in that namespace, so Close, and the DHCP server's goroutine, work
// from any thread.
//
// The guest's addressing follows the pod's routes, so that it routes as
// the pod netns does. It gets the pod IP with the interface's prefix
// length, the default gateway (option 3) and, when that alone would be
// wrong, option 121 (RFC 3442) with the interface's other routes: on-link
// ones first (router 0.0.0.0), then the gateway declared on the link if
// nothing else puts it there (a Calico /32 pod with gateway 169.254.1.1),
// then the routes via a router, then the default route again, since a
// client that takes option 121 ignores option 3.
//
// One thing routes cannot say: that the pod's own prefix is not on the
// link. CNI's ptp plugin (kind's kindnetd uses it) gives eth0
// 10.244.1.5/24 but replaces the kernel's connected route 10.244.1.0/24
// dev eth0 with 10.244.1.0/24 via 10.244.1.1 and puts only the gateway on
// the link (10.244.1.1 dev eth0 scope link); the node's side of the veth
// holds the gateway's address as a /32 and does no proxy ARP, so even a
// pod on the same node is reached through the node. A guest given the /24
// gets the kernel's connected route with the address, which stays ahead
// of any route its DHCP client adds for the same prefix (seen with udhcpc
// and systemd-networkd 252; newer networkd even turns a route inside the
// leased prefix into an on-link one), ARPs for its neighbours and gets no
// answer. So Inspect notes when the route the pod netns uses for its own
// prefix (the lowest metric) has a gateway, or there is none
// (Pod.PrefixOffLink), and then the guest gets the pod IP as a /32
// (subnet mask 255.255.255.255) and option 121 with the pod's routes,
// here 10.244.1.1/32 via 0.0.0.0, 10.244.1.0/24 via 10.244.1.1 and
// 0.0.0.0/0 via 10.244.1.1. The pod interface keeps its /24; a pod whose
// connected route is there (CNI's bridge plugin) gets what it always did.
//
// Clients that apply such a lease: systemd-networkd (which netplan
// renders to), ISC dhclient with Debian's dhclient-script and its
// rfc3442-classless-routes hook, dhcpcd, and busybox udhcpc with a script
// that applies $staticroutes (the test guest's does);
// TestNetworkdPrefixOffLink and TestUDHCPCPrefixOffLink run the first and
// the last in the ptp layout. A client that ignores option 121 still gets
// the /32 and the gateway in option 3, and must add the route to the
// gateway itself (Debian's dhclient-script does for a /32).
//
// The DHCP server logs through slog.Default() (answers at debug level,
// trouble at warn), each kind of per-packet record at most once every 30
// seconds, with the number held back. It reads and answers on one
// goroutine, so a flood from the guest costs a bounded amount of work per
// packet and no goroutines.
//
// Kernel features: the tun driver, the ingress qdisc (sch_ingress), the u32
// classifier (cls_u32) and the mirred action (act_mirred). matchall, flower,
// gact and police are not used, because some kernels lack them (the 6.18
// kernel these tests were written on has none of them). A missing feature
// is named in Attach's error.
//
// Detach undoes an Attach from what is on the node alone, for a process
// that holds no Attachment (the cleanup after a dead shim). Reattach
// takes such an attachment over instead, for a process that keeps the VM
// running: it checks the tap and the filters' qdiscs are there and starts
// the DHCP server again (the one part of an attachment that lives in the
// process), and its Attachment closes as Attach's.
//
// podnet may import the standard library, golang.org/x/sys,
// github.com/vishvananda/netlink and netns, and github.com/insomniacslk/dhcp. It
// imports no other vmpod package; pkg/vm (or the shim) imports it.
package podnet
