package podnet

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// tc objects Attach installs. Only u32 and mirred are used: matchall,
// flower and gact (the usual "pass") are absent from some kernels.
const (
	// prioDHCP on the tap lets the guest's DHCP client traffic up to the
	// DHCP server; prioRedirect, lower priority, sends everything else out
	// of the pod interface. On the pod interface only prioRedirect is used.
	prioDHCP     = 1
	prioRedirect = 2
)

var ingressParent = netlink.MakeHandle(0xffff, 0)

func ingressQdisc(link int) *netlink.Ingress {
	return &netlink.Ingress{QdiscAttrs: netlink.QdiscAttrs{
		LinkIndex: link,
		Parent:    netlink.HANDLE_INGRESS,
		Handle:    ingressParent,
	}}
}

// redirectAll sends every frame arriving on from out of to, as if to had
// transmitted it: the u32 selector with one all-zero key matches anything.
func redirectAll(from, to int) *netlink.U32 {
	return &netlink.U32{
		FilterAttrs: netlink.FilterAttrs{
			LinkIndex: from,
			Parent:    ingressParent,
			Priority:  prioRedirect,
			Protocol:  unix.ETH_P_ALL,
		},
		Sel: &netlink.TcU32Sel{
			Flags: netlink.TC_U32_TERMINAL,
			Keys:  []netlink.TcU32Key{{}},
		},
		Actions: []netlink.Action{netlink.NewMirredAction(to)},
	}
}

// passDHCP matches IPv4 UDP to port 67 and ends classification with no
// action, which the ingress hook takes as TC_ACT_OK: the frame goes up the
// tap's own stack, to the DHCP server. Offsets assume a 20-byte IPv4 header,
// so the first key insists on it; DHCP clients send no IP options, and a
// fragment (the last key) could not be a whole DHCP message anyway.
func passDHCP(tap int) *netlink.U32 {
	return &netlink.U32{
		FilterAttrs: netlink.FilterAttrs{
			LinkIndex: tap,
			Parent:    ingressParent,
			Priority:  prioDHCP,
			Protocol:  unix.ETH_P_IP,
		},
		Sel: &netlink.TcU32Sel{
			Flags: netlink.TC_U32_TERMINAL,
			// Values in host order; netlink converts them. Each key
			// compares the 32-bit word at Off (from the IPv4 header) under
			// Mask.
			Keys: []netlink.TcU32Key{
				{Off: 0, Mask: 0x0f000000, Val: 0x05000000}, // IHL 5: no options
				{Off: 4, Mask: 0x00003fff, Val: 0x00000000}, // MF clear, offset 0: not a fragment
				{Off: 8, Mask: 0x00ff0000, Val: unix.IPPROTO_UDP << 16},
				{Off: 20, Mask: 0x0000ffff, Val: 67}, // UDP destination port
			},
		},
	}
}

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
