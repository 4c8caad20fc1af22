package podnet

import (
	"fmt"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// Detach undoes an Attach from what is left on the node, for a process
// that holds no Attachment (the one that attached died): it deletes the
// tap (and with it its qdisc and filters) and the ingress qdisc on the pod
// interface, in the network namespace at nsPath. A namespace already gone
// took both with it; what is already gone is no error.
func Detach(nsPath, tap, podIf string) error {
	if nsPath == "" {
		return nil
	}
	ns, err := netns.GetFromPath(nsPath)
	if err != nil {
		return nil
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	if tap != "" {
		if l, err := h.LinkByName(tap); err == nil {
			if err := h.LinkDel(l); err != nil {
				return fmt.Errorf("remove tap %s: %w", tap, err)
			}
		}
	}
	if podIf == "" {
		return nil
	}
	l, err := h.LinkByName(podIf)
	if err != nil {
		return nil
	}
	qdiscs, err := h.QdiscList(l)
	if err != nil {
		return err
	}
	for _, q := range qdiscs {
		if q.Type() == "ingress" {
			if err := h.QdiscDel(q); err != nil {
				return fmt.Errorf("remove ingress qdisc of %s: %w", podIf, err)
			}
		}
	}
	return nil
}
