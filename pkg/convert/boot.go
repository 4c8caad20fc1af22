package convert

import (
	"strings"

	"libvirt.org/go/libvirtxml"

	"github.com/vmpod/vmpod/pkg/host"
	"github.com/vmpod/vmpod/pkg/vmspec"
)

// boot is where the guest starts, decided from the policy and what the
// image ships.
type boot int

const (
	bootNothing boot = iota // the policy asks for something the image lacks
	bootKernel
	bootDisk
)

func resolveBoot(src vmspec.BootSource, p Paths) boot {
	switch {
	case src == vmspec.BootKernel && p.Kernel != "",
		src == vmspec.BootAuto && p.Kernel != "":
		return bootKernel
	case src == vmspec.BootDisk && p.RootDisk != "",
		src == vmspec.BootAuto && p.RootDisk != "":
		return bootDisk
	}
	return bootNothing
}

// firmware picks SeaBIOS (libvirt's default), qboot for a BIOS guest that
// boots a kernel directly (it skips the option ROM and disk probing SeaBIOS
// does, ~0.3 s under TCG), or OVMF with the VM's own NVRAM.
func firmware(d *libvirtxml.Domain, fw vmspec.Firmware, b boot, hf host.Firmware, nvram string) error {
	os := domainOS(d)
	switch fw {
	case vmspec.FirmwareUEFI:
		if hf.UEFICode == "" || hf.UEFIVars == "" {
			return unsupported(vmspec.AnnotationFirmware, string(fw), "the node has no OVMF (Debian package ovmf)")
		}
		if nvram == "" {
			return missingPath("NVRAM")
		}
		os.Loader = &libvirtxml.DomainLoader{Path: hf.UEFICode, Readonly: "yes", Type: "pflash", Secure: "no"}
		os.NVRam = &libvirtxml.DomainNVRam{NVRam: nvram, Template: hf.UEFIVars}
	default:
		if b == bootKernel && hf.QBoot != "" {
			os.Loader = &libvirtxml.DomainLoader{Path: hf.QBoot, Readonly: "yes", Type: "rom"}
		}
	}
	return nil
}

// bootSource points the guest at the image's kernel or its disk. The kernel
// command line starts with the console, so kubectl logs shows the boot,
// and no_timer_check: Linux times its IO-APIC timer against a busy loop
// at boot, and under TCG on a busy node the check fails and the guest
// panics ("IO-APIC + timer doesn't work!", seen with 5 guests booting at
// once on 2 cores); a VM's timer is known to work.
func bootSource(d *libvirtxml.Domain, b boot, cmdline string, console bool, p Paths) error {
	os := domainOS(d)
	switch b {
	case bootKernel:
		os.Kernel = p.Kernel
		os.Initrd = p.Initrd
		var args []string
		if console {
			args = append(args, "console=ttyS0")
		}
		args = append(args, "no_timer_check")
		if cmdline != "" {
			args = append(args, cmdline)
		}
		os.Cmdline = strings.Join(args, " ")
	case bootDisk:
		// The root disk carries <boot order='1'/> (disks step).
	default:
		return unsupported(vmspec.AnnotationBoot, "", "the image has neither a kernel (/boot/vmlinux, /boot/vmlinuz) nor a disk (/disk/) to boot as asked")
	}
	return nil
}
