package convert

import "libvirt.org/go/libvirtxml"

// memory gives the guest exactly the pod's memory limit, with no balloon:
// the pod's RAM is the guest's, and QEMU's own overhead is counted apart
// (pkg/overhead), so nothing reclaims guest memory behind the pod's back.
func memory(d *libvirtxml.Domain, bytes uint64) error {
	kib := uint(bytes >> 10)
	d.Memory = &libvirtxml.DomainMemory{Value: kib, Unit: "KiB"}
	d.CurrentMemory = &libvirtxml.DomainCurrentMemory{Value: kib, Unit: "KiB"}
	devices(d).MemBalloon = &libvirtxml.DomainMemBalloon{Model: "none"}
	return nil
}
