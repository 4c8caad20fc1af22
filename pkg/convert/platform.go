package convert

import (
	"libvirt.org/go/libvirtxml"

	"github.com/vmpod/vmpod/pkg/host"
)

// clock keeps the guest on UTC like every pod. Under KVM the guest uses
// kvmclock; the legacy timers are told not to replay missed ticks in a
// burst after the VM was descheduled (the pod may be CPU-throttled).
func clock(d *libvirtxml.Domain, accel host.Accel) error {
	c := &libvirtxml.DomainClock{Offset: "utc", Timer: []libvirtxml.DomainTimer{
		{Name: "rtc", TickPolicy: "catchup"},
		{Name: "pit", TickPolicy: "delay"},
		{Name: "hpet", Present: "no"},
	}}
	if accel == host.AccelKVM {
		c.Timer = append(c.Timer, libvirtxml.DomainTimer{Name: "kvmclock", Present: "yes"})
	}
	d.Clock = c
	return nil
}

// features turns on ACPI (the power button is how a pod deletion reaches
// the guest) and the APIC, and turns off suspend: a suspended guest would
// look alive to the kubelet while doing nothing.
func features(d *libvirtxml.Domain) error {
	if d.Features == nil {
		d.Features = &libvirtxml.DomainFeatureList{}
	}
	d.Features.ACPI = &libvirtxml.DomainFeature{}
	d.Features.APIC = &libvirtxml.DomainFeatureAPIC{}
	d.Features.VMPort = &libvirtxml.DomainFeatureState{State: "off"}
	d.PM = &libvirtxml.DomainPM{
		SuspendToMem:  &libvirtxml.DomainPMPolicy{Enabled: "no"},
		SuspendToDisk: &libvirtxml.DomainPMPolicy{Enabled: "no"},
	}
	return nil
}

// platformDevices adds what every VM pod has and drops what none needs:
// a virtio RNG so guests do not stall on entropy at boot, and no USB, no
// graphics, no video: the console is the serial port. (The panic device
// is the crash step's.)
func platformDevices(d *libvirtxml.Domain) error {
	dev := devices(d)
	dev.RNGs = append(dev.RNGs, libvirtxml.DomainRNG{
		Model:   "virtio",
		Backend: &libvirtxml.DomainRNGBackend{Random: &libvirtxml.DomainRNGBackendRandom{Device: "/dev/urandom"}},
	})
	dev.Controllers = append(dev.Controllers, libvirtxml.DomainController{Type: "usb", Model: "none"})
	dev.Videos = append(dev.Videos, libvirtxml.DomainVideo{Model: libvirtxml.DomainVideoModel{Type: "none"}})
	return nil
}

// lifecycle maps guest events to what a container runtime expects: guest
// poweroff ends the VM (exit 0) and a guest reboot stays inside the pod.
// (A crash is the crash step's.)
func lifecycle(d *libvirtxml.Domain) error {
	d.OnPoweroff = "destroy"
	d.OnReboot = "restart"
	return nil
}
