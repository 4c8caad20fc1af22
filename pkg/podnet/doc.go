// Package podnet gives a VM the pod's network identity.
//
// CNI sets up the pod's network namespace as for any pod: one interface
// (eth0) with the pod IP, a default route and a MAC. podnet reads that
// (Inspect), creates a tap for the guest's NIC next to it, joins the two with
// tc and answers the guest's DHCP with exactly the pod's address, gateway,
// DNS and MTU (Attach). The guest NIC carries the pod interface's MAC, so to
// everything outside the pod the guest is the pod.
//
//	node ── eth0 ingress ── u32 match-all, mirred redirect ──► tap egress ──► guest
//	node ◄─ eth0 egress ◄── u32 match-all, mirred redirect ─── tap ingress ◄─ guest
//	                        except UDP to port 67, passed up to the
//	                        DHCP server bound to the tap
//
// Namespaces: every function works in the network namespace of the calling
// OS thread. The shim enters the pod's namespace for its whole process before
// any other thread starts, so it needs nothing more. A caller that switched a
// single thread with setns (tests do) must hold runtime.LockOSThread across
// Inspect and Attach. Attach keeps a netlink handle and a socket that were
// opened in that namespace, so Close, and the DHCP server's goroutines, work
// from any thread.
//
// The DHCP server logs through slog.Default() (answers at debug level,
// trouble at warn).
//
// Kernel features: the tun driver, the ingress qdisc (sch_ingress), the u32
// classifier (cls_u32) and the mirred action (act_mirred). matchall, flower
// and gact are not used, because some kernels lack them. A missing feature is
// named in Attach's error.
//
// podnet may import the standard library, golang.org/x/sys,
// github.com/vishvananda/netlink and github.com/insomniacslk/dhcp. It
// imports no other vmpod package; pkg/vm (or the shim) imports it.
package podnet
