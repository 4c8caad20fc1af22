package convert

import (
	"fmt"

	"libvirt.org/go/libvirtxml"

	"github.com/vmpod/vmpod/pkg/vmspec"
)

// disks attaches the image's disk (the qcow2 overlay the runtime made over
// it, never the image itself) and then each block volume in pod order, all
// on the pod's disk bus. The overlay's backing chain is spelled out and
// ends at the base with an empty <backingStore/>: libvirt then opens the
// base as the format given and probes no backing file from its header.
func disks(d *libvirtxml.Domain, bus vmspec.DiskBus, b boot, rootDisk, baseDisk, baseFormat string, vols []vmspec.Volume, volPaths map[string]string) error {
	names := targetNames(bus)
	dev := devices(d)
	if rootDisk != "" {
		disk := libvirtxml.DomainDisk{
			Device: "disk",
			Driver: &libvirtxml.DomainDiskDriver{Name: "qemu", Type: "qcow2", Discard: "unmap"},
			Source: &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: rootDisk}},
			Target: &libvirtxml.DomainDiskTarget{Dev: names.next(), Bus: string(bus)},
		}
		if baseDisk == "" || (baseFormat != "qcow2" && baseFormat != "raw") {
			return missingPath("BaseDisk and BaseFormat (qcow2 or raw)")
		}
		disk.BackingStore = &libvirtxml.DomainDiskBackingStore{
			Format:       &libvirtxml.DomainDiskFormat{Type: baseFormat},
			Source:       &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: baseDisk}},
			BackingStore: &libvirtxml.DomainDiskBackingStore{},
		}
		if b == bootDisk {
			disk.Boot = &libvirtxml.DomainDeviceBoot{Order: 1}
		}
		dev.Disks = append(dev.Disks, disk)
	}
	for _, v := range vols {
		path, ok := volPaths[v.Name]
		if !ok {
			return missingPath(fmt.Sprintf("Volumes[%q]", v.Name))
		}
		dev.Disks = append(dev.Disks, libvirtxml.DomainDisk{
			Device: "disk",
			Driver: &libvirtxml.DomainDiskDriver{Name: "qemu", Type: "raw", Cache: "none", IO: "native"},
			Source: &libvirtxml.DomainDiskSource{Block: &libvirtxml.DomainDiskSourceBlock{Dev: path}},
			Target: &libvirtxml.DomainDiskTarget{Dev: names.next(), Bus: string(bus)},
			Serial: v.Serial,
		})
	}
	if len(dev.Disks) > 26 {
		return unsupported("spec.containers[0].volumeDevices", fmt.Sprint(len(vols)), "at most 25 block volumes")
	}
	if bus == vmspec.DiskBusSCSI && len(dev.Disks) > 0 {
		dev.Controllers = append(dev.Controllers, libvirtxml.DomainController{
			Type: "scsi", Index: new(uint(0)), Model: "virtio-scsi",
		})
	}
	return nil
}

// targetNames hands out guest device names in order: vda, vdb, ... for
// virtio, sda, sdb, ... for sata and scsi. They are hints to libvirt (the
// guest names disks itself); libvirt only needs them unique per bus.
type targetNamer struct {
	prefix string
	n      int
}

func targetNames(bus vmspec.DiskBus) *targetNamer {
	if bus == vmspec.DiskBusVirtio {
		return &targetNamer{prefix: "vd"}
	}
	return &targetNamer{prefix: "sd"}
}

func (t *targetNamer) next() string {
	name := t.prefix + string(rune('a'+t.n%26))
	t.n++
	return name
}
