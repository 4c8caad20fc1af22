package convert

import "libvirt.org/go/libvirtxml"

// cloudInitSerial is what cloud-init's NoCloud source looks for, besides
// the filesystem label "cidata" the runtime gives the seed image.
const cloudInitSerial = "cidata"

// cloudInit attaches the NoCloud seed as a read-only virtio disk. NoCloud
// finds it by its filesystem label, so it needs no CD-ROM and no SATA
// controller, and it always comes after the pod's own disks so it never
// takes vda.
func cloudInit(d *libvirtxml.Domain, enabled bool, iso string) error {
	if !enabled {
		return nil
	}
	if iso == "" {
		return missingPath("CloudInitISO")
	}
	dev := devices(d)
	used := map[string]bool{}
	for _, disk := range dev.Disks {
		if disk.Target != nil {
			used[disk.Target.Dev] = true
		}
	}
	names := &targetNamer{prefix: "vd"}
	target := names.next()
	for used[target] {
		target = names.next()
	}
	dev.Disks = append(dev.Disks, libvirtxml.DomainDisk{
		Device:   "disk",
		Driver:   &libvirtxml.DomainDiskDriver{Name: "qemu", Type: "raw"},
		Source:   &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: iso}},
		Target:   &libvirtxml.DomainDiskTarget{Dev: target, Bus: "virtio"},
		ReadOnly: &libvirtxml.DomainDiskReadOnly{},
		Serial:   cloudInitSerial,
	})
	return nil
}
