package podnet_test

import (
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/insomniacslk/dhcp/dhcpv4"

	"github.com/vmpod/vmpod/pkg/podnet"
)

// TestCreateMoveWire is a runtime's order: the tap made in the node's
// namespace and opened there (by the hypervisor; here a tapGuest holds
// its queue), moved into the pod's, wired there. The queue opened in the
// node's namespace carries the guest's traffic in the pod's: a DHCP
// offer comes back through it. Nothing stays in the node's namespace, and
// Close leaves the pod's as it was.
func TestCreateMoveWire(t *testing.T) {
	tp := newTopology(t)
	before := podState(t, tp.pod)
	if err := inNetns(tp.node, func() error { return podnet.CreateTap(tapName) }); err != nil {
		t.Fatal(err)
	}
	if err := inNetns(tp.node, func() error { return podnet.CreateTap(tapName) }); err == nil || !strings.Contains(err.Error(), "exists already") {
		t.Errorf("a second CreateTap of %s: %v, want a refusal", tapName, err)
	}
	guest := openTap(t, tp.node, tapName, podMAC)
	if err := inNetns(tp.node, func() error { return podnet.MoveTap(tapName, "/run/netns/"+tp.pod) }); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("ip", "-n", tp.node, "link", "show", tapName).CombinedOutput(); err == nil {
		t.Errorf("%s is still in the node's namespace after MoveTap:\n%s", tapName, out)
	}
	var a *podnet.Attachment
	if err := inNetns(tp.pod, func() error {
		p, err := podnet.Inspect(podIf)
		if err != nil {
			return err
		}
		a, err = podnet.Wire(p, tapName)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	discover, err := dhcpv4.NewDiscovery(podMAC)
	if err != nil {
		t.Fatal(err)
	}
	if offer := guest.exchange(t, discover, netip.IPv4Unspecified(), 3); offer == nil || !offer.YourIPAddr.Equal(net.IP(podIP.AsSlice())) {
		t.Errorf("DISCOVER through the queue opened in the node's namespace: %v, want an offer of %s", offer, podIP)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	tapGone(t, tp.pod)
	if diff := cmp.Diff(before, podState(t, tp.pod)); diff != "" {
		t.Errorf("the pod's namespace after Close (-before +after):\n%s", diff)
	}
}

// TestMoveDeleteTapRefuseOthers: MoveTap moves only a tap, DeleteTap
// deletes only a tap (a link of that name of another kind is not ours)
// and finds nothing to do once it is gone.
func TestMoveDeleteTapRefuseOthers(t *testing.T) {
	tp := newTopology(t)
	// The node's veth end is no tap.
	if err := inNetns(tp.node, func() error { return podnet.MoveTap(nodeIf, "/run/netns/"+tp.pod) }); err == nil || !strings.Contains(err.Error(), "not a tap") {
		t.Errorf("MoveTap of the veth %s: %v, want a refusal", nodeIf, err)
	}
	if err := inNetns(tp.node, func() error { return podnet.DeleteTap(nodeIf) }); err != nil {
		t.Fatal(err)
	}
	run(t, "ip", "-n", tp.node, "link", "show", nodeIf)
	if err := inNetns(tp.node, func() error { return podnet.CreateTap(tapName) }); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := inNetns(tp.node, func() error { return podnet.DeleteTap(tapName) }); err != nil {
			t.Fatalf("DeleteTap #%d: %v", i+1, err)
		}
	}
	tapGone(t, tp.node)
}
