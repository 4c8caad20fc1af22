package host

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"math"
	"slices"

	"libvirt.org/go/libvirtxml"
)

// Option changes what Parse does beyond reading the XML.
type Option func(*options)

type options struct {
	present   func(path string) bool
	noKVM     bool
	kvmReason string
}

// WithFiles gives Parse a way to ask whether a file exists on the node
// (the caller passes an os.Stat wrapper; tests pass a fixed set). Parse then
// keeps only firmware whose files are all there, and looks for qboot, which
// libvirt does not report. Parse itself stays free of I/O.
func WithFiles(present func(path string) bool) Option {
	return func(o *options) { o.present = present }
}

// WithoutKVM tells Parse that KVM is not usable here even if libvirt
// offers it (a /dev/kvm that cannot run a guest: see pkg/node's probe), and
// why. Parse then leaves kvm out of Accels, expects domain capabilities
// for qemu (TCG), and keeps the reason in Host.KVMReason.
func WithoutKVM(reason string) Option {
	return func(o *options) { o.noKVM, o.kvmReason = true, reason }
}

// Parse reads one node's abilities from libvirt's capabilities XML
// (virConnectGetCapabilities) and domain capabilities XML
// (virConnectGetDomainCapabilities for the host arch and the best
// accelerator, kvm when the capabilities offer it, else qemu).
//
// domCaps may be empty: some drivers (libvirt's test driver) have none.
// The Host then comes from the capabilities alone: MaxVCPUs from the
// default machine type, no CPU modes or models, and firmware only from
// WithFiles (qboot).
func Parse(caps, domCaps []byte, opts ...Option) (Host, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}

	var c libvirtxml.Caps
	if err := unmarshal("capabilities", caps, &c); err != nil {
		return Host{}, err
	}
	h, machines, err := fromCaps(&c)
	if err != nil {
		return Host{}, err
	}
	if o.noKVM {
		h.Accels = slices.DeleteFunc(h.Accels, func(a Accel) bool { return a == AccelKVM })
		h.KVMReason = o.kvmReason
	}

	// The default machine type is listed first in the capabilities;
	// domain capabilities name it, and take precedence when present.
	defaultMachine := ""
	var uefiCodes []string
	if len(bytes.TrimSpace(domCaps)) > 0 {
		var dc libvirtxml.DomainCaps
		if err := unmarshal("domain capabilities", domCaps, &dc); err != nil {
			return Host{}, err
		}
		if err := checkDomCaps(&dc, h.Arch, h.Accels); err != nil {
			return Host{}, err
		}
		defaultMachine = dc.Machine
		if dc.VCPU != nil {
			h.MaxVCPUs = int(min(dc.VCPU.Max, math.MaxInt))
		}
		if h.Emulator == "" {
			h.Emulator = dc.Path
		}
		h.HostPassthrough, h.HostModel, h.CPUModels = cpuModes(dc.CPU)
		uefiCodes, h.Firmware.UEFIAuto = uefiLoaders(dc.OS)
	}
	if h.MaxVCPUs == 0 {
		h.MaxVCPUs = machineMaxCPUs(machines, defaultMachine)
	}

	code, vars := pickUEFI(uefiCodes, o.present)
	h.Firmware.UEFICode, h.Firmware.UEFIVars = code, vars
	if len(h.Accels) > 0 { // qboot is a QEMU ROM; other hypervisors cannot load it
		h.Firmware.QBoot = findQBoot(h.Arch, h.Emulator, o.present)
	}
	return h, nil
}

// unmarshal names the document in its errors, so a caller that fetched
// two documents knows which one is bad.
func unmarshal(what string, doc []byte, v any) error {
	if len(bytes.TrimSpace(doc)) == 0 {
		return fmt.Errorf("%s: empty document", what)
	}
	if err := xml.Unmarshal(doc, v); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}
