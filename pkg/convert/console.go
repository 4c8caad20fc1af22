package convert

import "libvirt.org/go/libvirtxml"

// console puts the serial port on a unix socket that QEMU listens on; the
// runtime connects to it before the guest's first instruction, logs what
// the guest writes (capped and rotated: QEMU's own log file would grow
// without a bound) and joins it to the container's stdio.
func console(d *libvirtxml.Domain, enabled bool, socket string) error {
	if !enabled {
		return nil
	}
	if socket == "" {
		return missingPath("Console")
	}
	port := uint(0)
	dev := devices(d)
	dev.Serials = append(dev.Serials, libvirtxml.DomainSerial{
		Source: &libvirtxml.DomainChardevSource{UNIX: &libvirtxml.DomainChardevSourceUNIX{Mode: "bind", Path: socket}},
		Target: &libvirtxml.DomainSerialTarget{Type: "isa-serial", Port: &port,
			Model: &libvirtxml.DomainSerialTargetModel{Name: "isa-serial"}},
	})
	dev.Consoles = append(dev.Consoles, libvirtxml.DomainConsole{
		Source: &libvirtxml.DomainChardevSource{UNIX: &libvirtxml.DomainChardevSourceUNIX{Mode: "bind", Path: socket}},
		Target: &libvirtxml.DomainConsoleTarget{Type: "serial", Port: &port},
	})
	return nil
}

// guestAgentChannel is the virtio-serial port name qemu-guest-agent opens.
const guestAgentChannel = "org.qemu.guest_agent.0"

// guestAgent adds the QEMU guest agent channel (kubectl exec goes through it).
func guestAgent(d *libvirtxml.Domain, socket string) error {
	if socket == "" {
		return nil
	}
	dev := devices(d)
	dev.Channels = append(dev.Channels, libvirtxml.DomainChannel{
		Source: &libvirtxml.DomainChardevSource{UNIX: &libvirtxml.DomainChardevSourceUNIX{Mode: "bind", Path: socket}},
		Target: &libvirtxml.DomainChannelTarget{VirtIO: &libvirtxml.DomainChannelTargetVirtIO{Name: guestAgentChannel}},
	})
	return nil
}
