package libvirt

import (
	"context"
	"testing"

	"github.com/containerd/errdefs"
	"libvirt.org/go/libvirtxml"

	"github.com/vmpod/vmpod/pkg/virt"
)

// The test driver cannot update devices, so it shows the refusals; what
// the guest sees of SetLink, test/cri's and test/e2e's restores check.
func TestSetLinkOnTestDriver(t *testing.T) {
	ctx := context.Background()
	c := openTest(t)
	name := defineTestDomain(t, c, func(dom *libvirtxml.Domain) {
		dom.Devices = &libvirtxml.DomainDeviceList{Interfaces: []libvirtxml.DomainInterface{linkTestInterface("")}}
	})
	if err := c.SetLink(ctx, name, false); !errdefs.IsFailedPrecondition(err) {
		t.Fatalf("SetLink on a stopped domain: %v, want FailedPrecondition", err)
	}
	if err := c.Start(ctx, name, virt.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.SetLink(ctx, name, false); !errdefs.IsNotImplemented(err) {
		t.Fatalf("SetLink on the test driver: %v, want NotImplemented", err)
	}
	// Up already: nothing to ask libvirt for.
	if err := c.SetLink(ctx, name, true); err != nil {
		t.Fatalf("SetLink(up) on a link that is up: %v", err)
	}
}

func linkTestInterface(state string) libvirtxml.DomainInterface {
	i := libvirtxml.DomainInterface{
		MAC:    &libvirtxml.DomainInterfaceMAC{Address: "52:54:00:12:34:56"},
		Source: &libvirtxml.DomainInterfaceSource{Ethernet: &libvirtxml.DomainInterfaceSourceEthernet{}},
		Target: &libvirtxml.DomainInterfaceTarget{Dev: "vmpod-link0", Managed: "no"},
		Model:  &libvirtxml.DomainInterfaceModel{Type: "virtio"},
		Alias:  &libvirtxml.DomainAlias{Name: "net0"},
	}
	if state != "" {
		i.Link = &libvirtxml.DomainInterfaceLink{State: state}
	}
	return i
}

// Each interface whose link is not in the state asked for gets one update:
// the interface as it is (libvirt matches it by MAC and alias), with the
// new state.
func TestLinkUpdates(t *testing.T) {
	dom := &libvirtxml.Domain{Devices: &libvirtxml.DomainDeviceList{Interfaces: []libvirtxml.DomainInterface{
		linkTestInterface(""), linkTestInterface("down"), linkTestInterface("up"),
	}}}
	for _, c := range []struct {
		up   bool
		want []int // which interfaces are updated
	}{{false, []int{0, 2}}, {true, []int{1}}} {
		xs, err := linkUpdates(dom, c.up)
		if err != nil {
			t.Fatal(err)
		}
		if len(xs) != len(c.want) {
			t.Fatalf("linkUpdates(up=%v) = %d updates, want %d: %q", c.up, len(xs), len(c.want), xs)
		}
		for _, x := range xs {
			var got libvirtxml.DomainInterface
			if err := got.Unmarshal(x); err != nil {
				t.Fatal(err)
			}
			want := linkTestInterface(linkState(c.up))
			if got.Link == nil || got.Link.State != want.Link.State || got.MAC.Address != want.MAC.Address ||
				got.Alias == nil || got.Alias.Name != "net0" || got.Target.Dev != want.Target.Dev {
				t.Errorf("update %s: want the interface with link %s", x, want.Link.State)
			}
		}
	}
	// The live definition is left as it was.
	if dom.Devices.Interfaces[0].Link != nil {
		t.Errorf("linkUpdates changed the definition it read: %+v", dom.Devices.Interfaces[0].Link)
	}
	if xs, err := linkUpdates(&libvirtxml.Domain{}, false); err != nil || len(xs) != 0 {
		t.Errorf("no devices: %q, %v", xs, err)
	}
}
