// Package portfwd makes a connection to localhost inside a VM pod's network
// namespace reach the guest, which is how containerd's CRI plugin serves
// port-forward (kubectl port-forward, crictl port-forward): it enters the
// sandbox's network namespace and dials localhost:<port> there (tcp4, then
// tcp6). In a VM pod that namespace keeps the pod IP on its own interface
// and hands the interface's traffic to the guest at the link layer
// (pkg/podnet), so a connection made in it, to localhost or to the pod IP,
// stays in its own stack and never reaches the guest.
//
// A Forwarder catches every TCP connection to 127.0.0.1 or ::1, any port,
// in the namespace it was started in, and connects it to the target (the
// pod IP) on the same port from the node's network namespace, where the
// pod IP is the guest, as the kubelet's probes reach it:
//
//	containerd, in the pod netns ── 127.0.0.1:8080 ──► sk_lookup program
//	  ──► the Forwarder's listener (accepted socket: local port 8080)
//	  ──► a socket made in the node netns ── pod IP:8080 ──► guest
//
// Catching any port takes one BPF program of type sk_lookup (Linux 5.9)
// attached to the namespace: for a TCP lookup whose destination is the
// loopback address it picks the Forwarder's listener, whatever the port,
// and the accepted socket's local address carries the port the client
// asked for. The program is a few dozen instructions written out here
// (steer.go) and loaded with bpf(2) directly: no compiler, no eBPF
// library, nothing added to the shim but this package. No nftables or
// conntrack either.
//
// A port the guest does not listen on is refused by the guest; the
// Forwarder then resets the caught connection, so the client's read fails
// at once instead of waiting: containerd 2.x reports "connection reset by
// peer" for the port and kubectl prints it; containerd 1.7's streaming
// server resets the stream without a message (kubernetes#111825), so the
// client's connection just ends. A guest that does not answer at
// all costs the client DialTimeout. Each connection is its own forward;
// any number run at once.
//
// Lifetime: the program stays attached while the Forwarder holds its link
// (Close, or the end of the process, detaches it) and never outlives the
// namespace; the listeners are sockets of the process. Nothing is made on
// the node or anywhere outside the pod's namespace.
//
// Security (the guest is untrusted): only connections whose destination is
// the loopback address of the pod's namespace are caught; the kernel drops
// packets to a loopback address that arrive on any other interface (and
// the guest's packets never reach that stack but DHCP, see pkg/podnet), so
// only a process inside the pod's namespace (containerd's port-forward,
// the shim, QEMU) can make one. Each goes to the target alone, the pod's
// own IP, on the port asked for: what it can reach is the guest, which
// every process in the namespace could reach anyway. The node's namespace
// is used through a descriptor the caller keeps away from child processes
// (close-on-exec); the thread that joins it to make a socket is never
// used for anything else and ends with its goroutine. A namespace's TCP
// connections to loopback all go to the guest: a VM pod runs nothing else
// there that listens on it.
//
// portfwd may import the standard library and golang.org/x/sys; nothing
// of vmpod. The shim imports it.
package portfwd
