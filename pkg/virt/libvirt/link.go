package libvirt

import (
	"context"
	"fmt"

	"github.com/containerd/errdefs"
	lv "libvirt.org/go/libvirt"
	"libvirt.org/go/libvirtxml"
)

// SetLink implements virt.Hypervisor. libvirt changes an interface's link
// state through a device update with the interface as the live definition
// has it and the new <link state>; QEMU's set_link then flips the NIC's
// status bit and tells the guest with a config interrupt.
func (c *Conn) SetLink(ctx context.Context, name string, up bool) error {
	d, st, err := c.domainState(ctx, name)
	if err != nil {
		return err
	}
	defer d.Free()
	what := fmt.Sprintf("take the links of %s %s", subject(name), linkState(up))
	if !st.Active() {
		return fmt.Errorf("%s: %w: %s", what, errdefs.ErrFailedPrecondition, st)
	}
	dom, _, err := liveDefinition(d, name)
	if err != nil {
		return err
	}
	xs, err := linkUpdates(dom, up)
	if err != nil {
		return fmt.Errorf("%s: %w: %v", what, errdefs.ErrInternal, err)
	}
	for _, x := range xs {
		if err := classify(d.UpdateDeviceFlags(x, lv.DOMAIN_DEVICE_MODIFY_LIVE), what); err != nil {
			return err
		}
	}
	return nil
}

func linkState(up bool) string {
	if up {
		return "up"
	}
	return "down"
}

// linkUpdates are the device updates that give each of dom's interfaces
// the link state up, one interface each; none for an interface in that
// state already (libvirt records no <link> for a link that is up).
func linkUpdates(dom *libvirtxml.Domain, up bool) ([]string, error) {
	if dom.Devices == nil {
		return nil, nil
	}
	var xs []string
	for _, iface := range dom.Devices.Interfaces {
		isUp := iface.Link == nil || iface.Link.State != "down"
		if isUp == up {
			continue
		}
		iface.Link = &libvirtxml.DomainInterfaceLink{State: linkState(up)}
		x, err := iface.Marshal()
		if err != nil {
			return nil, err
		}
		xs = append(xs, x)
	}
	return xs, nil
}
