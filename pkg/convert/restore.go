package convert

import (
	"fmt"

	"github.com/containerd/errdefs"
	"libvirt.org/go/libvirtxml"
)

// Restored is the definition that restores a domain on this node from its
// saved definition (the one in a state file, as the hypervisor reads it
// back). The hypervisor loads a saved guest only into the same virtual
// hardware, so saved's is kept word for word: its name and UUID, its
// devices, their addresses, its guest's MAC addresses, its vCPUs and
// memory as they were when it was saved. What is on the host comes from
// fresh, the definition Domain makes here for the same spec: the emulator
// and its environment (the jail), the kernel, initrd and NVRAM files,
// each disk's files (matched by target), the console's and the guest
// agent's sockets, and the taps.
//
// A device in one definition that the other lacks is an error
// (InvalidArgument): the spec here is not the one the state was saved
// with.
func Restored(saved string, fresh *libvirtxml.Domain) (string, error) {
	var d libvirtxml.Domain
	if err := d.Unmarshal(saved); err != nil {
		return "", fmt.Errorf("saved definition: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	d.ID = nil // the id of the saved process
	d.QEMUCommandline = fresh.QEMUCommandline
	if d.OS != nil && fresh.OS != nil {
		d.OS.Kernel, d.OS.Initrd = fresh.OS.Kernel, fresh.OS.Initrd
		if d.OS.NVRam != nil && fresh.OS.NVRam != nil {
			d.OS.NVRam.NVRam = fresh.OS.NVRam.NVRam
		}
	}
	sd, fd := d.Devices, fresh.Devices
	if sd == nil || fd == nil {
		return "", differ("devices", "")
	}
	sd.Emulator = fd.Emulator

	disks := map[string]libvirtxml.DomainDisk{}
	for _, disk := range fd.Disks {
		if disk.Target != nil {
			disks[disk.Target.Dev] = disk
		}
	}
	if len(sd.Disks) != len(disks) {
		return "", differ("disks", fmt.Sprintf("%d saved, %d here", len(sd.Disks), len(disks)))
	}
	for i := range sd.Disks {
		s := &sd.Disks[i]
		if s.Target == nil {
			return "", differ("disks", "a saved disk without a target")
		}
		f, ok := disks[s.Target.Dev]
		if !ok {
			return "", differ("disks", "no disk "+s.Target.Dev+" here")
		}
		s.Source, s.BackingStore = f.Source, f.BackingStore
	}
	if len(sd.Serials) != len(fd.Serials) || len(sd.Consoles) != len(fd.Consoles) {
		return "", differ("serial console", "")
	}
	for i := range sd.Serials {
		sd.Serials[i].Source, sd.Serials[i].Log = fd.Serials[i].Source, fd.Serials[i].Log
	}
	for i := range sd.Consoles {
		sd.Consoles[i].Source, sd.Consoles[i].Log = fd.Consoles[i].Source, fd.Consoles[i].Log
	}
	if len(sd.Channels) != len(fd.Channels) {
		return "", differ("guest agent channel", "")
	}
	for i := range sd.Channels {
		sd.Channels[i].Source = fd.Channels[i].Source
	}
	if len(sd.Interfaces) != len(fd.Interfaces) {
		return "", differ("network interfaces", fmt.Sprintf("%d saved, %d here", len(sd.Interfaces), len(fd.Interfaces)))
	}
	for i := range sd.Interfaces {
		sd.Interfaces[i].Target = fd.Interfaces[i].Target
	}
	if len(sd.Filesystems) != len(fd.Filesystems) {
		return "", differ("shares", "")
	}
	for i := range sd.Filesystems {
		sd.Filesystems[i].Source = fd.Filesystems[i].Source
	}
	x, err := d.Marshal()
	if err != nil {
		return "", fmt.Errorf("restored definition: %v: %w", err, errdefs.ErrInternal)
	}
	return x, nil
}

func differ(what, detail string) error {
	if detail != "" {
		detail = " (" + detail + ")"
	}
	return fmt.Errorf("the saved VM's %s differ from this spec's%s: %w", what, detail, errdefs.ErrInvalidArgument)
}

// SavedMachine is the machine type a saved definition names: the versioned
// type the VM ran on (pc-q35-7.2 for a spec's q35), which a node must offer
// to restore it.
func SavedMachine(saved string) (string, error) {
	var d libvirtxml.Domain
	if err := d.Unmarshal(saved); err != nil {
		return "", fmt.Errorf("saved definition: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	if d.OS == nil || d.OS.Type == nil || d.OS.Type.Machine == "" {
		return "", fmt.Errorf("saved definition names no machine type: %w", errdefs.ErrInvalidArgument)
	}
	return d.OS.Type.Machine, nil
}
