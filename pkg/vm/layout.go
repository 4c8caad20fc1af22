package vm

import (
	"path/filepath"

	"github.com/vmpod/vmpod/pkg/convert"
	"github.com/vmpod/vmpod/pkg/vmspec"
)

// Layout is where one VM's files live in its state dir. Everything the VM
// writes is under Dir, so removing Dir removes the VM's files.
type Layout struct{ Dir string }

// Overlay is the qcow2 overlay whose backing file is the image's disk.
func (l Layout) Overlay() string { return filepath.Join(l.Dir, "disk.qcow2") }

// Console is the unix socket QEMU serves the serial console on.
func (l Layout) Console() string { return filepath.Join(l.Dir, "console.sock") }

// ConsoleLog records everything the guest writes to its serial console.
func (l Layout) ConsoleLog() string { return filepath.Join(l.Dir, "console.log") }

// GuestAgent is the QEMU guest agent channel's socket.
func (l Layout) GuestAgent() string { return filepath.Join(l.Dir, "qga.sock") }

// NVRAM is the VM's UEFI variable store.
func (l Layout) NVRAM() string { return filepath.Join(l.Dir, "nvram.fd") }

// CloudInitISO is the NoCloud seed image.
func (l Layout) CloudInitISO() string { return filepath.Join(l.Dir, "cidata.iso") }

// Libvirt is the embedded libvirt driver's root for this pod.
func (l Layout) Libvirt() string { return filepath.Join(l.Dir, "libvirt") }

// Paths are the convert.Paths of a VM laid out in l, booting img. Volumes
// and NICs are the runtime's to fill once it has made them.
func (l Layout) Paths(s vmspec.Spec, img Image) convert.Paths {
	p := convert.Paths{
		Kernel:     img.Kernel,
		Initrd:     img.Initrd,
		NVRAM:      l.NVRAM(),
		Console:    l.Console(),
		ConsoleLog: l.ConsoleLog(),
		GuestAgent: l.GuestAgent(),
	}
	if img.Disk != "" {
		p.RootDisk = l.Overlay()
		p.BaseDisk, p.BaseFormat = img.Disk, img.DiskFormat
	}
	if s.CloudInit != nil {
		p.CloudInitISO = l.CloudInitISO()
	}
	return p
}
