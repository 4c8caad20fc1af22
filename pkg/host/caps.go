package host

import (
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strings"

	"libvirt.org/go/libvirtxml"
)

// fromCaps fills what the capabilities alone say. It also returns the
// machine types in document order, because the first one is QEMU's default
// and MaxVCPUs may have to fall back to it.
func fromCaps(c *libvirtxml.Caps) (Host, []libvirtxml.CapsGuestMachine, error) {
	if c.Host.CPU == nil || c.Host.CPU.Arch == "" {
		return Host{}, nil, errors.New("capabilities: no <host><cpu><arch>")
	}
	arch := c.Host.CPU.Arch
	guests := hvmGuests(c, arch)
	if len(guests) == 0 {
		// Guests of other arches run only under emulation, far too slowly
		// to be worth scheduling a VM onto.
		return Host{}, nil, fmt.Errorf("capabilities: no hvm guest for arch %s", arch)
	}
	mem, err := memoryBytes(c.Host.NUMA)
	if err != nil {
		return Host{}, nil, err
	}
	accels := accelsOf(guests)
	machines := machinesOf(guests)
	return Host{
		Arch:        arch,
		Emulator:    emulatorOf(guests, accels),
		Accels:      accels,
		Machines:    machineNames(machines),
		CPU:         hostCPU(c.Host.CPU),
		MemoryBytes: mem,
		CPUs:        cpuCount(c.Host.NUMA),
	}, machines, nil
}

func hvmGuests(c *libvirtxml.Caps, arch string) []libvirtxml.CapsGuestArch {
	var out []libvirtxml.CapsGuestArch
	for _, g := range c.Guests {
		if g.OSType == "hvm" && g.Arch.Name == arch {
			out = append(out, g.Arch)
		}
	}
	return out
}

// accelsOf keeps only kvm and qemu: other domain types (the test driver's
// "test") are not something vmpod can start.
func accelsOf(guests []libvirtxml.CapsGuestArch) []Accel {
	var out []Accel
	for _, a := range []Accel{AccelKVM, AccelTCG} {
		if hasDomain(guests, a) {
			out = append(out, a)
		}
	}
	return out
}

func hasDomain(guests []libvirtxml.CapsGuestArch, a Accel) bool {
	for _, g := range guests {
		for _, d := range g.Domains {
			if Accel(d.Type) == a {
				return true
			}
		}
	}
	return false
}

// emulatorOf prefers a per-domain-type emulator of the best accelerator,
// which libvirt may give when kvm needs a different binary.
func emulatorOf(guests []libvirtxml.CapsGuestArch, accels []Accel) string {
	if len(accels) > 0 {
		for _, g := range guests {
			for _, d := range g.Domains {
				if Accel(d.Type) == accels[0] && d.Emulator != "" {
					return d.Emulator
				}
			}
		}
	}
	for _, g := range guests {
		if g.Emulator != "" {
			return g.Emulator
		}
	}
	return ""
}

// machinesOf lists per-arch machines first (QEMU's default leads), then
// any per-domain-type ones older libvirt versions report.
func machinesOf(guests []libvirtxml.CapsGuestArch) []libvirtxml.CapsGuestMachine {
	var out []libvirtxml.CapsGuestMachine
	for _, g := range guests {
		out = append(out, g.Machines...)
	}
	for _, g := range guests {
		for _, d := range g.Domains {
			out = append(out, d.Machines...)
		}
	}
	return out
}

// machineNames lists aliases and canonical names alike, because a pod may
// ask for either ("q35" or "pc-q35-7.2").
func machineNames(ms []libvirtxml.CapsGuestMachine) []string {
	var out []string
	for _, m := range ms {
		for _, n := range []string{m.Name, m.Canonical} {
			if n = strings.TrimSpace(n); n != "" {
				out = append(out, n)
			}
		}
	}
	return sortedSet(out)
}

// machineMaxCPUs returns the vCPU limit of the named machine type (an alias
// or a canonical name), or of the first one listed when name is "" or
// unknown: libvirt lists QEMU's default machine first.
func machineMaxCPUs(ms []libvirtxml.CapsGuestMachine, name string) int {
	for _, m := range ms {
		if name != "" && strings.TrimSpace(m.Name) == name {
			return max(m.MaxCPUs, 0)
		}
	}
	if len(ms) == 0 {
		return 0
	}
	return max(ms[0].MaxCPUs, 0)
}

func hostCPU(c *libvirtxml.CapsHostCPU) CPU {
	var features []string
	for _, f := range c.FeatureFlags {
		features = append(features, f.Name)
	}
	return CPU{Vendor: c.Vendor, Model: c.Model, Features: sortedSet(features)}
}

// memoryBytes sums the NUMA cells: the capabilities have no other memory
// figure. Overflow is an error rather than a wrapped, plausible number.
func memoryBytes(t *libvirtxml.CapsHostNUMATopology) (uint64, error) {
	if t == nil || t.Cells == nil {
		return 0, nil
	}
	var total uint64
	for _, cell := range t.Cells.Cells {
		if cell.Memory == nil {
			continue
		}
		b, err := scale(cell.Memory.Size, cell.Memory.Unit)
		if err != nil {
			return 0, fmt.Errorf("capabilities: NUMA cell %d memory: %w", cell.ID, err)
		}
		sum, carry := bits.Add64(total, b, 0)
		if carry != 0 {
			return 0, fmt.Errorf("capabilities: NUMA cell %d memory: total overflows 64 bits", cell.ID)
		}
		total = sum
	}
	return total, nil
}

// cpuCount is the number of logical CPUs the NUMA cells list (each
// cell's num, as libvirt counts them; a cell without one counts its
// <cpu> elements).
func cpuCount(t *libvirtxml.CapsHostNUMATopology) int {
	if t == nil || t.Cells == nil {
		return 0
	}
	n := 0
	for _, cell := range t.Cells.Cells {
		if cell.CPUS == nil {
			continue
		}
		c := int(min(cell.CPUS.Num, 1<<16))
		if c == 0 {
			c = len(cell.CPUS.CPUs)
		}
		n += c
	}
	return n
}

// scale converts a libvirt scaled integer to bytes. The units are
// libvirt's: "KB" is 1000, "k" and "KiB" are 1024, and a missing unit
// means KiB for NUMA cell memory.
func scale(n uint64, unit string) (uint64, error) {
	u := strings.ToLower(unit)
	if u == "" {
		u = "kib"
	}
	if u == "b" || u == "byte" || u == "bytes" {
		return n, nil
	}
	power := strings.IndexByte("kmgtpe", u[0]) + 1
	var base uint64
	switch u[1:] {
	case "", "ib":
		base = 1024
	case "b":
		base = 1000
	}
	if power == 0 || base == 0 {
		return 0, fmt.Errorf("unknown unit %q", unit)
	}
	b := n
	for range power {
		hi, lo := bits.Mul64(b, base)
		if hi != 0 {
			return 0, fmt.Errorf("%d %s overflows 64 bits", n, unit)
		}
		b = lo
	}
	return b, nil
}

// sortedSet gives every list in Host one order, so that labels and golden
// files do not change when libvirt reorders its output.
func sortedSet(s []string) []string {
	// A name libvirt left empty (<feature name=''/>) or padded would
	// become a label such as cpu-feature.vmpod.io/ that names nothing.
	var out []string
	for _, n := range s {
		if n = strings.TrimSpace(n); n != "" {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
