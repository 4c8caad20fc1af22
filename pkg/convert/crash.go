package convert

import "libvirt.org/go/libvirtxml"

// crash makes a guest kernel panic end the VM, and so the container, with
// the kubelet's restart policy deciding what comes next; without it a
// panicked guest sits in its panic loop, its pod Running, for ever.
//
// The panic device is QEMU's ISA pvpanic (`-device pvpanic`, I/O port
// 0x505, the ACPI device QEMU0001), not pvpanic-pci: it needs no PCI slot,
// exists on both pc and q35 under TCG and KVM, and is the one guests pick
// up by default (Linux's pvpanic-mmio binds QEMU0001 from the ACPI table
// and its module is auto-loaded by udev; virtio-win has a driver for it).
// On a panic the guest writes to the port, QEMU reports GUEST_PANICKED,
// and libvirt destroys the domain with the reason "crashed".
//
// on_crash is destroy, not coredump-destroy or coredump-restart: a dump
// writes the whole guest RAM to the node's disk, outside the pod's limits,
// as often as the guest chooses to panic, and the guest is not trusted.
// Not preserve either: a paused, panicked QEMU would hold the pod's memory
// with no one to look at it. Not restart: a reboot loop inside a Running
// pod is what the restart policy and its back-off are for.
func crash(d *libvirtxml.Domain) error {
	dev := devices(d)
	dev.Panics = append(dev.Panics, libvirtxml.DomainPanic{Model: "isa"})
	d.OnCrash = "destroy"
	return nil
}
