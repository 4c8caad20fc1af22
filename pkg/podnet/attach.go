package podnet

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Attachment is a tap joined to the pod interface, with the DHCP server
// that serves the guest behind it. Close undoes it.
type Attachment struct {
	pod  Pod
	tap  string
	dhcp *dhcpServer

	mu   sync.Mutex
	undo []func() error // in the order acquired; Close runs them backwards
}

// Tap is the name of the tap the guest NIC must use (QEMU
// -netdev tap,ifname=..., libvirt <target dev=... managed='no'/>).
func (a *Attachment) Tap() string { return a.tap }

// Leased is when the guest was last given the pod IP by DHCP (an ACK
// with the address), the zero time if never since Attach or Reattach.
func (a *Attachment) Leased() time.Time {
	if a.dhcp == nil {
		return time.Time{}
	}
	if n := a.dhcp.leased.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// MAC is the address the guest NIC must have: the pod interface's.
func (a *Attachment) MAC() net.HardwareAddr { return append(net.HardwareAddr(nil), a.pod.MAC...) }

// MTU is the pod interface's MTU, which the tap has too and the guest is
// offered by DHCP.
func (a *Attachment) MTU() int { return a.pod.MTU }

// Attach creates the tap named tap in the current network namespace (see
// the package comment) and wires it to p.Interface (Wire). On error nothing
// is left behind.
func Attach(p Pod, tap string) (*Attachment, error) {
	if err := validate(p, tap); err != nil {
		return nil, err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := CreateTap(tap); err != nil {
		return nil, err
	}
	return Wire(p, tap)
}

// CreateTap creates the tap named tap in the calling thread's network
// namespace: single queue, owned by root, down, with a virtio-net header
// and no packet information. It never takes over a link someone else
// made: one of that name is an error. A runtime makes it in the node's
// namespace, where the hypervisor opens it (no hypervisor thread ever
// enters a pod's namespace), then moves it into the pod's (MoveTap) and
// wires it there (Wire).
func CreateTap(tap string) error {
	if err := validTapName(tap); err != nil {
		return err
	}
	return here(func(h *netlink.Handle) error {
		// IFF_TUN_EXCL enforces it; the look-up first gives the clearer error.
		if _, err := h.LinkByName(tap); err == nil {
			return fmt.Errorf("tap %q: a link of that name exists already", tap)
		}
		err := h.LinkAdd(&netlink.Tuntap{
			LinkAttrs: netlink.LinkAttrs{Name: tap},
			Mode:      netlink.TUNTAP_MODE_TAP,
			Flags:     netlink.TUNTAP_TUN_EXCL | netlink.TUNTAP_NO_PI | netlink.TUNTAP_VNET_HDR,
		})
		if errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("tap %q: %w (the kernel needs the tun driver, CONFIG_TUN, and /dev/net/tun)", tap, err)
		}
		if err != nil {
			return fmt.Errorf("tap %q: %w", tap, err)
		}
		return nil
	})
}

// here runs f with a netlink handle in the calling thread's network
// namespace, on that thread.
func here(f func(*netlink.Handle) error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("netlink: %w", err)
	}
	defer h.Close()
	return f(h)
}

// validTapName checks that tap can name a link.
func validTapName(tap string) error {
	if tap == "" || len(tap) >= unix.IFNAMSIZ || filepath.Base(tap) != tap {
		return fmt.Errorf("tap name %q: want 1 to %d characters, no '/'", tap, unix.IFNAMSIZ-1)
	}
	return nil
}

// MoveTap moves the tap named tap from the calling thread's network
// namespace into the one at nsPath. A process that has it open (QEMU)
// keeps it: the tap's file stays attached to the device wherever it
// goes. The tap comes up down in its new namespace, without addresses.
func MoveTap(tap, nsPath string) error {
	return here(func(h *netlink.Handle) error {
		l, err := tapByName(h, tap)
		if err != nil {
			return err
		}
		ns, err := netns.GetFromPath(nsPath)
		if err != nil {
			return fmt.Errorf("tap %q: the pod's network namespace %s: %w", tap, nsPath, err)
		}
		defer ns.Close()
		if err := h.LinkSetNsFd(l, int(ns)); err != nil {
			return fmt.Errorf("tap %q: move into %s: %w", tap, nsPath, err)
		}
		return nil
	})
}

// DeleteTap deletes the tap named tap from the calling thread's network
// namespace; none there is no error, nor is a link of that name that is
// no tap (it is not ours, and stays).
func DeleteTap(tap string) error {
	return here(func(h *netlink.Handle) error {
		l, err := h.LinkByName(tap)
		if err != nil {
			return nil
		}
		if _, ok := l.(*netlink.Tuntap); !ok {
			return nil
		}
		return ignoreNoLink(h.LinkDel(l))
	})
}

// tapByName is the tap named tap in h's namespace, an error if there is
// none or the link of that name is no tap.
func tapByName(h *netlink.Handle, tap string) (netlink.Link, error) {
	l, err := h.LinkByName(tap)
	if err != nil {
		return nil, fmt.Errorf("tap %q: %w", tap, err)
	}
	if _, ok := l.(*netlink.Tuntap); !ok {
		return nil, fmt.Errorf("tap %q is a %s, not a tap", tap, l.Type())
	}
	return l, nil
}

// Wire wires the tap named tap, which CreateTap made (here, or in the
// node's namespace and MoveTap brought here), to p.Interface in the
// current network namespace (see the package comment), and owns it from
// then on: Close deletes it.
//
//   - the tap: up, with p.MTU, IPv6 off (it is a conduit; the pod's stack
//     has nothing to say to the guest);
//   - an ingress qdisc on each side; on the pod interface a u32 filter that
//     redirects every frame to the tap; on the tap an allow list (see
//     guestFilters): the guest's DHCP client traffic goes up to the DHCP
//     server, frames with the guest's own source addresses (p.MAC and
//     p.Addr, p.IPv6) are redirected out of the pod interface, and
//     everything else is dropped (see dropFilter);
//   - a DHCP server on the tap that offers the guest exactly p.
//
// The guest is not trusted: whatever it sends, the node sees nothing from
// it but frames from the pod's MAC and the pod's addresses, and the pod
// network namespace's own stack sees nothing but its DHCP client messages
// (from the guest's MAC, from 0.0.0.0 or the pod IP, UDP 68 to 67), which
// only the DHCP server's socket, bound to the tap, takes. So even with
// ip_forward on in the pod netns the stack can forward nothing with a
// forged source.
//
// The pod IP stays on the pod interface. That is harmless: with every
// incoming frame redirected at ingress, the pod's own stack never receives
// anything on it, so it cannot answer ARP or reset the guest's connections.
// And it keeps the pod interface as CNI left it (CNI CHECK and DEL see what
// they expect), leaves Close nothing to restore there, and gives the DHCP
// server's replies a source address.
//
// On error nothing is left behind, the tap included.
func Wire(p Pod, tap string) (_ *Attachment, retErr error) {
	if err := validate(p, tap); err != nil {
		return nil, err
	}
	// Every step must happen in the same namespace: tun, sysctl and socket
	// calls act in the namespace of the thread that makes them.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	a := &Attachment{pod: p, tap: tap}
	defer func() {
		if retErr != nil {
			_ = a.Close()
		}
	}()

	// A handle's sockets stay in this namespace, so Close can run on any
	// thread.
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink: %w", err)
	}
	a.onClose(func() error { h.Close(); return nil })

	tapLink, err := tapByName(h, tap)
	if err != nil {
		return nil, err
	}
	tapIndex := tapLink.Attrs().Index
	a.onClose(func() error {
		return ignoreNoLink(h.LinkDel(&netlink.Tuntap{LinkAttrs: netlink.LinkAttrs{Index: tapIndex}}))
	})

	podLink, err := h.LinkByName(p.Interface)
	if err != nil {
		return nil, fmt.Errorf("pod interface %q: %w", p.Interface, err)
	}
	if !bytes.Equal(podLink.Attrs().HardwareAddr, p.MAC) {
		return nil, fmt.Errorf("pod interface %q: MAC is %s, not %s: it changed since Inspect", p.Interface, podLink.Attrs().HardwareAddr, p.MAC)
	}
	podIndex := podLink.Attrs().Index

	if err := tapSysctls(tap); err != nil {
		return nil, err
	}
	if err := h.LinkSetMTU(tapLink, p.MTU); err != nil {
		return nil, fmt.Errorf("tap %q: MTU %d: %w", tap, p.MTU, err)
	}
	if err := h.LinkSetUp(tapLink); err != nil {
		return nil, fmt.Errorf("tap %q: up: %w", tap, err)
	}

	// Guest to pod interface. The qdisc's filters go with it. The drop
	// filter first, so that no frame ever finds the allow list without it.
	if err := addIngress(h, tapIndex, tap); err != nil {
		return nil, err
	}
	a.onClose(func() error { return delIngress(h, tapIndex) })
	if err := addDropFilters(h, p, tapIndex, tap); err != nil {
		return nil, err
	}
	for _, f := range guestFilters(p, tapIndex, podIndex) {
		if err := addFilter(h, f, tap); err != nil {
			return nil, err
		}
	}

	srv, err := serveDHCP(p, tap)
	if err != nil {
		return nil, err
	}
	a.dhcp = srv
	a.onClose(srv.close)

	// Pod interface to guest, last: from here on the pod's own stack is
	// deaf, so no earlier failure can leave it that way.
	if err := addIngress(h, podIndex, p.Interface); err != nil {
		return nil, err
	}
	a.onClose(func() error { return delIngress(h, podIndex) })
	if err := addFilter(h, redirectAll(podIndex, tapIndex), p.Interface); err != nil {
		return nil, err
	}
	return a, nil
}

// Close removes the pod interface's qdisc (and so its filter), stops the
// DHCP server, removes the tap (and so its qdisc and filters), in that
// order. It leaves the pod interface as Attach found it. A second Close does
// nothing; errors name what could not be undone.
func (a *Attachment) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var errs []error
	for i := len(a.undo) - 1; i >= 0; i-- {
		if err := a.undo[i](); err != nil {
			errs = append(errs, err)
		}
	}
	a.undo = nil
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("detaching tap %q from %q: %w", a.tap, a.pod.Interface, err)
	}
	return nil
}

// Abandon leaves a as a process that dies does: its DHCP server stops,
// the tap and the filters stay on the node for the next process's
// Reattach. a must not be closed after.
func (a *Attachment) Abandon() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.undo = nil
	if a.dhcp == nil {
		return nil
	}
	return a.dhcp.close()
}

func (a *Attachment) onClose(f func() error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.undo = append(a.undo, f)
}

func validate(p Pod, tap string) error {
	if err := validTapName(tap); err != nil {
		return err
	}
	switch {
	case tap == p.Interface:
		return fmt.Errorf("tap name %q is the pod interface's", tap)
	case len(p.MAC) != 6:
		return fmt.Errorf("pod %q: MAC %q is not an Ethernet address", p.Interface, p.MAC)
	case !p.Addr.IsValid() || !p.Addr.Addr().Is4():
		return fmt.Errorf("pod %q: no IPv4 address", p.Interface)
	case !p.Gateway.Is4():
		return fmt.Errorf("pod %q: no IPv4 gateway", p.Interface)
	case p.MTU < 68 || p.MTU > 65535:
		return fmt.Errorf("pod %q: MTU %d out of range", p.Interface, p.MTU)
	case len(p.IPv6) > maxIPv6:
		return fmt.Errorf("pod %q: %d IPv6 addresses, more than the %d vmpod lets a guest use", p.Interface, len(p.IPv6), maxIPv6)
	}
	for _, a := range p.IPv6 {
		if !a.Is6() || a.Is4In6() || a.IsUnspecified() || a.IsMulticast() {
			return fmt.Errorf("pod %q: %v is not an IPv6 address a guest may send from", p.Interface, a)
		}
	}
	return nil
}

// tapSysctls makes the tap a quiet conduit that still hears DHCP rebinds.
// A rebinding guest broadcasts from the pod IP, which this namespace holds
// on the pod interface: without accept_local the tap's stack drops it as a
// martian, and reverse-path filtering would too. The effective rp_filter is
// the larger of conf/all and conf/<tap>; conf/all is the pod's, so it is only
// reported, not changed.
func tapSysctls(tap string) error {
	if b, err := os.ReadFile("/proc/sys/net/ipv4/conf/all/rp_filter"); err == nil && strings.TrimSpace(string(b)) != "0" {
		slog.Warn("net.ipv4.conf.all.rp_filter is on in the pod network namespace: the guest's DHCP rebinds will go unanswered (it keeps its address until the lease ends)",
			"tap", tap, "rp_filter", strings.TrimSpace(string(b)))
	}
	for _, s := range []struct{ path, value string }{
		{"ipv4/conf/" + tap + "/accept_local", "1"},
		{"ipv4/conf/" + tap + "/rp_filter", "0"},
		{"ipv6/conf/" + tap + "/disable_ipv6", "1"},
	} {
		err := os.WriteFile("/proc/sys/net/"+s.path, []byte(s.value), 0)
		if errors.Is(err, os.ErrNotExist) && strings.HasPrefix(s.path, "ipv6/") {
			continue // a kernel without IPv6
		}
		if err != nil {
			return fmt.Errorf("tap %q: sysctl net.%s: %w", tap, strings.ReplaceAll(s.path, "/", "."), err)
		}
	}
	return nil
}

func ignoreNoLink(err error) error {
	var notFound netlink.LinkNotFoundError
	if err == nil || errors.As(err, &notFound) || errors.Is(err, unix.ENODEV) {
		return nil
	}
	return err
}
