package convert

import (
	"fmt"
	"slices"

	"libvirt.org/go/libvirtxml"

	"github.com/vmpod/vmpod/pkg/host"
	"github.com/vmpod/vmpod/pkg/vmspec"
)

// cpu sets the vCPU count, one socket of that many cores (guests license
// and schedule by socket, and one socket is what a pod's CPU limit means),
// and the CPU model. A CPU vmpod names (host-passthrough, host-model, a
// named model, qemu64 for features) has vmx and svm disabled unless the
// pod asks for nesting: under KVM they would give the guest the host
// kernel's nested-virtualisation code to work on, a large attack surface
// few guests need. QEMU's default model under TCG (no mode) is left as it
// is: nesting there is QEMU's own emulation, inside its jail.
//
// A VM that may grow (maxVCPUs above vcpus, vmpod.io/max-vcpus) is made
// with room for maxVCPUs. Under KVM vcpus of them are plugged at boot
// and a resize hot-plugs the rest (pkg/vm). Under TCG all are plugged
// at boot and the guest keeps all but vcpus offline (hotplugRoom): QEMU
// 7.2 aborts when it adds a vCPU thread to TCG while every region of
// its translation cache is in use (tcg_region_initial_alloc, seen on a
// node), which a VM's code cache reaches in normal running.
func cpu(d *libvirtxml.Domain, c vmspec.CPU, vcpus, maxVCPUs int, accel host.Accel, h host.Host) error {
	top := max(vcpus, maxVCPUs)
	if h.MaxVCPUs > 0 && top > h.MaxVCPUs {
		field := "spec.containers[0].resources.limits.cpu"
		if top > vcpus {
			field = vmspec.AnnotationMaxVCPUs
		}
		return unsupported(field, fmt.Sprint(top), fmt.Sprintf("the node allows at most %d vCPUs", h.MaxVCPUs))
	}
	d.VCPU = &libvirtxml.DomainVCPU{Placement: "static", Value: uint(top)}
	if top > vcpus && accel == host.AccelKVM {
		d.VCPU.Current = uint(vcpus)
	}
	dc := &libvirtxml.DomainCPU{
		Topology: &libvirtxml.DomainCPUTopology{Sockets: 1, Dies: 1, Cores: top, Threads: 1},
	}
	model := c.Model
	if model == vmspec.CPUModelAuto {
		model = vmspec.CPUModelHostPassthrough
		if accel != host.AccelKVM {
			model = "" // QEMU's default model; TCG cannot pass the host CPU through
		}
	}
	switch model {
	case vmspec.CPUModelHostPassthrough:
		if accel != host.AccelKVM || !h.HostPassthrough {
			return unsupported(vmspec.AnnotationCPUModel, model, "needs KVM, and the VM runs under TCG here")
		}
		dc.Mode = "host-passthrough"
		dc.Check = "none"
		dc.Migratable = "off"
	case vmspec.CPUModelHostModel:
		if h.HostModel.Model == "" {
			return unsupported(vmspec.AnnotationCPUModel, model, "libvirt offers no host-model CPU on this node")
		}
		dc.Mode = "host-model"
	case "":
		if len(c.Features) > 0 {
			// Features need a model to add to; qemu64 is QEMU's default.
			dc.Mode = "custom"
			dc.Match = "exact"
			dc.Model = &libvirtxml.DomainCPUModel{Value: "qemu64", Fallback: "forbid"}
		}
	default:
		if len(h.CPUModels) > 0 && !slices.Contains(h.CPUModels, model) {
			return unsupported(vmspec.AnnotationCPUModel, model, "not a CPU model this node can run")
		}
		dc.Mode = "custom"
		dc.Match = "exact"
		dc.Check = "partial"
		dc.Model = &libvirtxml.DomainCPUModel{Value: model, Fallback: "forbid"}
	}
	for _, f := range c.Features {
		dc.Features = append(dc.Features, libvirtxml.DomainCPUFeature{Policy: "require", Name: f})
	}
	if dc.Mode != "" && !c.Nested {
		for _, f := range vmspec.NestedFeatures {
			dc.Features = append(dc.Features, libvirtxml.DomainCPUFeature{Policy: "disable", Name: f})
		}
	}
	d.CPU = dc
	return nil
}

// DefaultMaxVCPUs is the room to grow in vCPUs a node like h gives a VM
// whose pod set no vmpod.io/max-vcpus: up to the node's CPUs and at most
// upTo (the node's --default-max-vcpus), where the VM can grow live. 0
// gives no room: the pod set a maximum (it is the pod's choice, a
// maximum equal to the vCPUs included), upTo is 0, the VM has that many
// vCPUs already, or the VM runs under TCG and boots from its own disk,
// whose kernel command line is not vmpod's to keep the extra vCPUs
// offline with (see cpu and hotplugRoom). It is what cpu then makes room
// for, so it resolves the accelerator and the boot as Domain does; a
// spec Domain refuses gets none.
func DefaultMaxVCPUs(s vmspec.Spec, h host.Host, p Paths, upTo int) int {
	if s.MaxVCPUs != 0 || upTo <= 0 {
		return 0
	}
	n := upTo
	if h.CPUs > 0 {
		n = min(n, h.CPUs)
	}
	if h.MaxVCPUs > 0 {
		n = min(n, h.MaxVCPUs)
	}
	if n <= s.VCPUs {
		return 0
	}
	accel, err := resolveAccel(s.Accel, h)
	if err != nil {
		return 0
	}
	if accel != host.AccelKVM && resolveBoot(s.Boot.Source, p) != bootKernel {
		return 0
	}
	return n
}
