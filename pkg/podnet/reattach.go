package podnet

import (
	"bytes"
	"fmt"
	"runtime"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Reattach takes over an Attach that a process now gone made for p on
// tap, in the current network namespace (see the package comment): the
// tap, its filters and the pod interface's redirect are on the node and
// outlived that process, but its DHCP server did not, and the guest
// rebinds (or, rebooted, asks anew) through it. Reattach checks that the
// tap and both ingress qdiscs are there and the pod interface still has
// p's MAC, and starts the DHCP server on the tap again. The Attachment it
// returns is Attach's: Close undoes the whole attachment, as after
// Attach. On error nothing is changed (the node's part stays for Detach).
func Reattach(p Pod, tap string) (_ *Attachment, retErr error) {
	if err := validate(p, tap); err != nil {
		return nil, err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink: %w", err)
	}
	defer func() {
		if retErr != nil {
			h.Close()
		}
	}()
	podLink, err := h.LinkByName(p.Interface)
	if err != nil {
		return nil, fmt.Errorf("pod interface %q: %w", p.Interface, err)
	}
	if !bytes.Equal(podLink.Attrs().HardwareAddr, p.MAC) {
		return nil, fmt.Errorf("pod interface %q: MAC is %s, not %s", p.Interface, podLink.Attrs().HardwareAddr, p.MAC)
	}
	tapLink, err := h.LinkByName(tap)
	if err != nil {
		return nil, fmt.Errorf("tap %q: %w: the attachment is gone", tap, err)
	}
	if _, ok := tapLink.(*netlink.Tuntap); !ok {
		return nil, fmt.Errorf("tap %q is a %s, not a tap", tap, tapLink.Type())
	}
	for _, l := range []netlink.Link{tapLink, podLink} {
		if err := hasIngress(h, l); err != nil {
			return nil, err
		}
	}
	podIndex, tapIndex := podLink.Attrs().Index, tapLink.Attrs().Index

	srv, err := serveDHCP(p, tap)
	if err != nil {
		return nil, err
	}
	// Close's order is Attach's: the pod interface's redirect, the DHCP
	// server, the tap with its filters.
	a := &Attachment{pod: p, tap: tap, dhcp: srv}
	a.onClose(func() error { h.Close(); return nil })
	a.onClose(func() error {
		return ignoreNoLink(h.LinkDel(&netlink.Tuntap{LinkAttrs: netlink.LinkAttrs{Index: tapIndex}}))
	})
	a.onClose(srv.close)
	a.onClose(func() error { return delIngress(h, podIndex) })
	return a, nil
}

// hasIngress says whether l has the ingress qdisc Attach added.
func hasIngress(h *netlink.Handle, l netlink.Link) error {
	qdiscs, err := h.QdiscList(l)
	if err != nil {
		return fmt.Errorf("qdiscs of %q: %w", l.Attrs().Name, err)
	}
	for _, q := range qdiscs {
		if q.Type() == "ingress" {
			return nil
		}
	}
	return fmt.Errorf("%q has no ingress qdisc: the attachment is incomplete", l.Attrs().Name)
}
