package convert

import (
	"fmt"

	"libvirt.org/go/libvirtxml"

	"github.com/vmpod/vmpod/pkg/vmspec"
)

// network attaches each guest NIC to the tap the runtime made in the pod's
// network namespace (managed='no': libvirt opens it, never creates or
// deletes it), with the pod interface's MAC so the guest owns the pod IP.
func network(d *libvirtxml.Domain, nics []vmspec.NIC, taps map[string]NIC) error {
	dev := devices(d)
	for _, n := range nics {
		t, ok := taps[n.Name]
		if !ok || t.Tap == "" || t.MAC == "" {
			return missingPath(fmt.Sprintf("NICs[%q] with tap and MAC", n.Name))
		}
		iface := libvirtxml.DomainInterface{
			Source: &libvirtxml.DomainInterfaceSource{Ethernet: &libvirtxml.DomainInterfaceSourceEthernet{}},
			Target: &libvirtxml.DomainInterfaceTarget{Dev: t.Tap, Managed: "no"},
			MAC:    &libvirtxml.DomainInterfaceMAC{Address: t.MAC},
			Model:  &libvirtxml.DomainInterfaceModel{Type: "virtio"},
		}
		if t.MTU > 0 {
			iface.MTU = &libvirtxml.DomainInterfaceMTU{Size: t.MTU}
		}
		dev.Interfaces = append(dev.Interfaces, iface)
	}
	return nil
}
