package libvirt

import (
	"context"
	"encoding/xml"
	"fmt"

	"github.com/containerd/errdefs"
	lv "libvirt.org/go/libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/vmpod/vmpod/pkg/virt"
)

// Size implements virt.Hypervisor.
func (c *Conn) Size(ctx context.Context, name string) (virt.Size, error) {
	d, dom, x, err := c.running(ctx, name, "size of "+subject(name))
	if err != nil {
		return virt.Size{}, err
	}
	defer d.Free()
	return sizeOf(dom, x)
}

// running is the domain name, which must be running or paused
// (FailedPrecondition, under what, otherwise), with its live definition,
// parsed and as libvirt wrote it. The caller frees the domain.
func (c *Conn) running(ctx context.Context, name, what string) (*lv.Domain, *libvirtxml.Domain, string, error) {
	d, st, err := c.domainState(ctx, name)
	if err != nil {
		return nil, nil, "", err
	}
	if !st.Active() {
		_ = d.Free()
		return nil, nil, "", fmt.Errorf("%s: %w: %s", what, errdefs.ErrFailedPrecondition, st)
	}
	dom, x, err := liveDefinition(d, name)
	if err != nil {
		_ = d.Free()
		return nil, nil, "", err
	}
	return d, dom, x, nil
}

// sizeOf reads the plugged vCPUs and the virtio-mem device from a live
// definition, dom as parsed and x as libvirt wrote it: libvirt updates
// <vcpu current> on every plug and the device's <current> from QEMU's
// size-change events (libvirtxml has no field for that one).
func sizeOf(dom *libvirtxml.Domain, x string) (s virt.Size, err error) {
	if v := dom.VCPU; v != nil {
		s.MaxVCPUs, s.VCPUs = int(v.Value), int(v.Value)
		if v.Current != 0 {
			s.VCPUs = int(v.Current)
		}
	}
	if m := dom.MaximumMemory; m != nil {
		s.DIMMSlots = int(m.Slots)
	}
	for _, m := range dimms(dom) {
		s.DIMMs++
		s.DIMMBytes += kib(m.Target.Size.Value, m.Target.Size.Unit)
	}
	defer func() { s.HotplugPluggedBytes += s.DIMMBytes }()
	if m := virtioMem(dom); m != nil && m.Target != nil {
		t := m.Target
		if t.Size != nil {
			s.HotplugMaxBytes = kib(t.Size.Value, t.Size.Unit)
		}
		if t.Requested != nil {
			s.HotplugRequestedBytes = kib(t.Requested.Value, t.Requested.Unit)
		}
		var cur struct {
			Memory []struct {
				Model   string `xml:"model,attr"`
				Current struct {
					Value uint   `xml:",chardata"`
					Unit  string `xml:"unit,attr"`
				} `xml:"target>current"`
			} `xml:"devices>memory"`
		}
		if err := xml.Unmarshal([]byte(x), &cur); err != nil {
			return virt.Size{}, fmt.Errorf("live definition: %w: %v", errdefs.ErrInternal, err)
		}
		for _, m := range cur.Memory {
			if m.Model == "virtio-mem" {
				s.HotplugPluggedBytes = kib(m.Current.Value, m.Current.Unit)
			}
		}
	}
	return s, nil
}

// kib converts a libvirt memory value to bytes; vmpod writes KiB and
// libvirt answers in KiB, so another unit is a bug worth seeing as 0.
func kib(v uint, unit string) uint64 {
	if unit != "" && unit != "KiB" {
		return 0
	}
	return uint64(v) << 10
}

// PlugVCPUs implements virt.Hypervisor.
func (c *Conn) PlugVCPUs(ctx context.Context, name string, n int) error {
	d, dom, x, err := c.running(ctx, name, "plug vCPUs into "+subject(name))
	if err != nil {
		return err
	}
	defer d.Free()
	sz, err := sizeOf(dom, x)
	if err != nil {
		return err
	}
	switch {
	case n < 1 || n > sz.MaxVCPUs:
		return fmt.Errorf("plug vCPUs into %s: %w: %d vCPUs asked, the domain has room for 1 to %d",
			subject(name), errdefs.ErrInvalidArgument, n, sz.MaxVCPUs)
	case n <= sz.VCPUs:
		return nil
	}
	return classify(d.SetVcpusFlags(uint(n), lv.DOMAIN_VCPU_LIVE), fmt.Sprintf("plug %d vCPUs into %s", n, subject(name)))
}

// RequestHotplugMemory implements virt.Hypervisor. libvirt changes a
// virtio-mem device's <requested> through a device update with the same
// device, as it is in the live definition, and the new size.
func (c *Conn) RequestHotplugMemory(ctx context.Context, name string, bytes uint64) error {
	what := fmt.Sprintf("request %d MiB of hot-pluggable memory in %s", bytes>>20, subject(name))
	d, dom, _, err := c.running(ctx, name, what)
	if err != nil {
		return err
	}
	defer d.Free()
	m := virtioMem(dom)
	if m == nil || m.Target == nil || m.Target.Size == nil {
		return fmt.Errorf("%s: %w: the domain has no virtio-mem device", what, errdefs.ErrInvalidArgument)
	}
	if max := kib(m.Target.Size.Value, m.Target.Size.Unit); bytes > max {
		return fmt.Errorf("%s: %w: the device holds at most %d MiB", what, errdefs.ErrInvalidArgument, max>>20)
	}
	dev := *m
	t := *m.Target
	t.Requested = &libvirtxml.DomainMemorydevTargetRequested{Value: uint(bytes >> 10), Unit: "KiB"}
	dev.Target = &t
	x, err := dev.Marshal()
	if err != nil {
		return fmt.Errorf("%s: %w: %v", what, errdefs.ErrInternal, err)
	}
	return classify(d.UpdateDeviceFlags(x, lv.DOMAIN_DEVICE_MODIFY_LIVE), what)
}

// PlugDIMM implements virt.Hypervisor: a device attach, live only, as a
// DIMM plugged into a running guest is part of what it runs now, not of
// the definition it boots from.
func (c *Conn) PlugDIMM(ctx context.Context, name string, bytes uint64) error {
	what := fmt.Sprintf("plug a %d MiB DIMM into %s", bytes>>20, subject(name))
	d, dom, x, err := c.running(ctx, name, what)
	if err != nil {
		return err
	}
	defer d.Free()
	if bytes == 0 || bytes%(1<<20) != 0 {
		return fmt.Errorf("%s: %w: %d bytes is not a whole number of MiB", what, errdefs.ErrInvalidArgument, bytes)
	}
	sz, err := sizeOf(dom, x)
	if err != nil {
		return err
	}
	var used int // every memory device takes a slot
	if dom.Devices != nil {
		used = len(dom.Devices.Memorydevs)
	}
	if sz.DIMMSlots-used <= 0 {
		return fmt.Errorf("%s: %w: all %d memory slots are taken", what, errdefs.ErrInvalidArgument, sz.DIMMSlots)
	}
	dev := libvirtxml.DomainMemorydev{
		Model: "dimm",
		Target: &libvirtxml.DomainMemorydevTarget{
			Size: &libvirtxml.DomainMemorydevTargetSize{Value: uint(bytes >> 10), Unit: "KiB"},
			Node: &libvirtxml.DomainMemorydevTargetNode{Value: 0},
		},
	}
	dx, err := dev.Marshal()
	if err != nil {
		return fmt.Errorf("%s: %w: %v", what, errdefs.ErrInternal, err)
	}
	return classify(d.AttachDeviceFlags(dx, lv.DOMAIN_DEVICE_MODIFY_LIVE), what)
}

// UnplugDIMM implements virt.Hypervisor. libvirt sends the eject
// request and waits a few seconds for QEMU's DEVICE_DELETED; when the
// guest has not ejected by then it returns all the same and drops the
// device from the live definition only if the event comes later, so the
// live definition, not the return, says whether the DIMM went.
func (c *Conn) UnplugDIMM(ctx context.Context, name string) error {
	what := "unplug a DIMM from " + subject(name)
	d, dom, _, err := c.running(ctx, name, what)
	if err != nil {
		return err
	}
	defer d.Free()
	all := dimms(dom)
	if len(all) == 0 {
		return fmt.Errorf("%s: %w: none is plugged", what, errdefs.ErrNotFound)
	}
	// The newest: libvirt appends a plugged device, and its alias
	// (dimmN) and slot identify it to the detach.
	dx, err := all[len(all)-1].Marshal()
	if err != nil {
		return fmt.Errorf("%s: %w: %v", what, errdefs.ErrInternal, err)
	}
	return classify(d.DetachDeviceFlags(dx, lv.DOMAIN_DEVICE_MODIFY_LIVE), what)
}

// dimms are the domain's DIMMs in the order of its live definition.
func dimms(dom *libvirtxml.Domain) []libvirtxml.DomainMemorydev {
	if dom.Devices == nil {
		return nil
	}
	var out []libvirtxml.DomainMemorydev
	for _, m := range dom.Devices.Memorydevs {
		if m.Model == "dimm" && m.Target != nil && m.Target.Size != nil {
			out = append(out, m)
		}
	}
	return out
}

// liveDefinition is the domain's definition as it runs, parsed and as
// libvirt wrote it.
func liveDefinition(d *lv.Domain, name string) (*libvirtxml.Domain, string, error) {
	x, err := d.GetXMLDesc(0)
	if err != nil {
		return nil, "", classify(err, "live definition of "+subject(name))
	}
	var dom libvirtxml.Domain
	if err := dom.Unmarshal(x); err != nil {
		return nil, "", fmt.Errorf("live definition of %s: %w: %v", subject(name), errdefs.ErrInternal, err)
	}
	return &dom, x, nil
}

// virtioMem is the domain's virtio-mem device, nil when it has none
// (vmpod makes at most one).
func virtioMem(dom *libvirtxml.Domain) *libvirtxml.DomainMemorydev {
	if dom.Devices == nil {
		return nil
	}
	for i := range dom.Devices.Memorydevs {
		if m := &dom.Devices.Memorydevs[i]; m.Model == "virtio-mem" {
			return m
		}
	}
	return nil
}
