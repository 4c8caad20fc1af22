package convert

import (
	"fmt"
	"strings"

	"github.com/containerd/errdefs"
	"libvirt.org/go/libvirtxml"

	"github.com/vmpod/vmpod/pkg/host"
	"github.com/vmpod/vmpod/pkg/vmspec"
)

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

// hotplugRoom readies the guest for a live resize within its maxima
// (vmpod.io/max-vcpus, vmpod.io/max-memory); it runs after cpu, memory
// and boot.
//
// Memory: room for hotplugBytes more RAM in one virtio-mem device, none
// of it plugged at boot: a resize asks the guest to take or give back
// blocks of it (pkg/vm), and QEMU's memory follows without a balloon's
// guesswork. libvirt puts memory devices on a NUMA node, so the guest
// gets one cell with every vCPU and the boot RAM. The guest onlines what
// is plugged only when told to: on direct kernel boot the command line
// says so, movable so that it can be unplugged again; a disk-booted
// guest's own kernel command line or udev must (docs/day2.md).
//
// A VM that grows in DIMMs (vmpod.io/memory-hotplug: dimm, for guests
// without virtio_mem) gets the same cell and a slot per DIMM of
// dimmBytes in <maxMemory>, and no memory device at boot: pkg/vm plugs
// and unplugs whole DIMMs, which the guest onlines by the same command
// line.
//
// vCPUs under TCG, where cpu plugged them all: the kernel command line
// brings up only vcpus of them (maxcpus), and the guest agent onlines
// the others when a resize asks. A disk-booted guest takes no command
// line from vmpod, so it would start with every vCPU online: refused.
func hotplugRoom(d *libvirtxml.Domain, vcpus int, accel host.Accel, hotplugBytes, dimmBytes uint64) error {
	if d.CPU == nil || d.VCPU == nil || d.Memory == nil {
		return fmt.Errorf("hotplug room needs the cpu and memory steps first: %w", errdefs.ErrInternal)
	}
	kernel := d.OS != nil && d.OS.Kernel != ""
	var args []string
	if int(d.VCPU.Value) > vcpus && d.VCPU.Current == 0 {
		if !kernel {
			return unsupported(vmspec.AnnotationMaxVCPUs, fmt.Sprint(d.VCPU.Value),
				"under TCG the guest's extra vCPUs are kept offline through the kernel command line, and a disk-booted guest takes none from vmpod (QEMU 7.2 cannot hot-plug a vCPU under TCG); boot the image's kernel or run under KVM")
		}
		args = append(args, fmt.Sprintf("maxcpus=%d", vcpus))
	}
	if hotplugBytes > 0 {
		base := d.Memory.Value
		d.MaximumMemory = &libvirtxml.DomainMaxMemory{Value: base + uint(hotplugBytes>>10), Unit: "KiB", Slots: 1}
		d.CPU.Numa = &libvirtxml.DomainNuma{Cell: []libvirtxml.DomainCell{{
			ID: new(uint), CPUs: fmt.Sprintf("0-%d", d.VCPU.Value-1), Memory: base, Unit: "KiB",
		}}}
		args = append(args, "memhp_default_state=online_movable")
	}
	switch {
	case hotplugBytes == 0:
	case dimmBytes > 0:
		if hotplugBytes%dimmBytes != 0 {
			return fmt.Errorf("%d MiB of room is not a whole number of %d MiB DIMMs: %w", hotplugBytes>>20, dimmBytes>>20, errdefs.ErrInternal)
		}
		d.MaximumMemory.Slots = uint(hotplugBytes / dimmBytes)
	default:
		devices(d).Memorydevs = append(devices(d).Memorydevs, libvirtxml.DomainMemorydev{
			Model: "virtio-mem",
			Target: &libvirtxml.DomainMemorydevTarget{
				Size:      &libvirtxml.DomainMemorydevTargetSize{Value: uint(hotplugBytes >> 10), Unit: "KiB"},
				Node:      &libvirtxml.DomainMemorydevTargetNode{Value: 0},
				Block:     &libvirtxml.DomainMemorydevTargetBlock{Value: vmspec.MemoryBlockBytes >> 10, Unit: "KiB"},
				Requested: &libvirtxml.DomainMemorydevTargetRequested{Value: 0, Unit: "KiB"},
			},
		})
	}
	if kernel && len(args) > 0 {
		d.OS.Cmdline = strings.TrimSpace(d.OS.Cmdline + " " + strings.Join(args, " "))
	}
	return nil
}
