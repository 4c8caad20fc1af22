package podnet_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/insomniacslk/dhcp/dhcpv4"

	"github.com/vmpod/vmpod/pkg/podnet"
)

// TestReattach: an attachment whose process died (its DHCP server gone,
// the tap and filters left) is taken over: the guest is answered again,
// and Close then undoes it all as after Attach. Without a tap there is
// nothing to take over, and Reattach changes nothing.
func TestReattach(t *testing.T) {
	tp := newTopology(t)
	before := podState(t, tp.pod)
	var first *podnet.Attachment
	var p podnet.Pod
	if err := inNetns(tp.pod, func() (err error) {
		if p, err = podnet.Inspect(podIf); err != nil {
			return err
		}
		first, err = podnet.Attach(p, tapName)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := first.Abandon(); err != nil {
		t.Fatal(err)
	}
	attached := podState(t, tp.pod)

	var a *podnet.Attachment
	if err := inNetns(tp.pod, func() (err error) {
		a, err = podnet.Reattach(p, tapName)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			a.Close()
		}
	})
	// The links' flags may differ: the tap's carrier is up while someone
	// holds it open (QEMU does; here only Attach's own descriptor, until
	// the garbage collector closes it).
	after := podState(t, tp.pod)
	delete(attached, "links")
	delete(after, "links")
	if diff := cmp.Diff(attached, after); diff != "" {
		t.Errorf("Reattach changed the pod's network (-before +after):\n%s", diff)
	}
	guest := openTap(t, tp.pod, tapName, podMAC)
	discover, err := dhcpv4.NewDiscovery(podMAC)
	if err != nil {
		t.Fatal(err)
	}
	if offer := guest.exchange(t, discover, netip.IPv4Unspecified(), 3); offer == nil {
		t.Error("no OFFER after Reattach")
	} else if got := offer.YourIPAddr.String(); got != podIP.String() {
		t.Errorf("OFFER after Reattach: %s, want %s", got, podIP)
	}

	closed = true
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	tapGone(t, tp.pod)
	if diff := cmp.Diff(before, podState(t, tp.pod)); diff != "" {
		t.Errorf("Close after Reattach left the pod's network changed (-before +after):\n%s", diff)
	}

	err = inNetns(tp.pod, func() (err error) {
		_, err = podnet.Reattach(p, tapName)
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "the attachment is gone") {
		t.Errorf("Reattach without a tap: %v, want it refused", err)
	}
	if diff := cmp.Diff(before, podState(t, tp.pod)); diff != "" {
		t.Errorf("a refused Reattach changed the pod's network (-before +after):\n%s", diff)
	}
}
