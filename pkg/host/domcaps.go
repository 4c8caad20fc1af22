package host

import (
	"fmt"
	"slices"

	"libvirt.org/go/libvirtxml"
)

// checkDomCaps rejects domain capabilities that do not describe the best
// accelerator on the host arch: CPU models and vCPU limits differ between
// kvm and qemu, and mixing them would label a node with abilities it lacks.
func checkDomCaps(dc *libvirtxml.DomainCaps, arch string, accels []Accel) error {
	if dc.Arch != arch {
		return fmt.Errorf("domain capabilities: arch %q, want the host arch %q", dc.Arch, arch)
	}
	if len(accels) == 0 {
		return fmt.Errorf("domain capabilities: for domain type %q, but capabilities offer neither kvm nor qemu", dc.Domain)
	}
	if Accel(dc.Domain) != accels[0] {
		return fmt.Errorf("domain capabilities: for domain type %q, want %q (the best accelerator)", dc.Domain, accels[0])
	}
	return nil
}

// cpuModes reads the three CPU modes vmpod offers a pod. For host-model it
// keeps the features libvirt adds on top of the model (policy require);
// the model's own features are implied by its name.
func cpuModes(c *libvirtxml.DomainCapsCPU) (passthrough bool, hostModel CPU, models []string) {
	if c == nil {
		return false, CPU{}, nil
	}
	for _, m := range c.Modes {
		if m.Supported != "yes" {
			continue
		}
		switch m.Name {
		case "host-passthrough":
			passthrough = true
		case "host-model":
			hostModel = hostModelCPU(m)
		case "custom":
			for _, model := range m.Models {
				if model.Usable == "yes" && model.Name != "" {
					models = append(models, model.Name)
				}
			}
		}
	}
	return passthrough, hostModel, sortedSet(models)
}

func hostModelCPU(m libvirtxml.DomainCapsCPUMode) CPU {
	if len(m.Models) == 0 {
		return CPU{}
	}
	var features []string
	for _, f := range m.Features {
		if f.Policy == "require" || f.Policy == "" {
			features = append(features, f.Name)
		}
	}
	return CPU{Vendor: m.Vendor, Model: m.Models[0].Name, Features: sortedSet(features)}
}

// uefiLoaders returns the firmware code images libvirt knows for this
// machine type, in libvirt's order, and whether <os firmware='efi'> works.
func uefiLoaders(o *libvirtxml.DomainCapsOS) (codes []string, auto bool) {
	if o == nil || o.Supported != "yes" {
		return nil, false
	}
	for _, e := range o.Enums {
		if e.Name == "firmware" && slices.Contains(e.Values, "efi") {
			auto = true
		}
	}
	if o.Loader != nil && o.Loader.Supported == "yes" {
		codes = o.Loader.Values
	}
	return codes, auto
}
