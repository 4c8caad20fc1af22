package convert_test

import (
	"encoding/xml"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"libvirt.org/go/libvirtxml"

	"github.com/vmpod/vmpod/pkg/convert"
	"github.com/vmpod/vmpod/pkg/host"
	"github.com/vmpod/vmpod/pkg/vmspec"
	. "github.com/vmpod/vmpod/pkg/vmspec/vmspectest"
)

// Bits of FuzzDomainXML's layout: what the runtime prepared differs from
// VM to VM (an image without a kernel or a disk, a raw base, no jailer).
const (
	layoutNoKernel = 1 << iota
	layoutNoRootDisk
	layoutRawBase
	layoutNoEmulator
	layoutVolumes
	layoutNoGuestAgent
	layoutNoEmulatorEnv
)

// FuzzDomainXML converts what FuzzDomain's generator makes, on a fuzzed
// layout of Paths, and checks the XML libvirt is given:
//
//   - it round-trips through libvirtxml: Marshal, Unmarshal and Marshal
//     again give the same document, and the domain read back equals the
//     one converted;
//   - it says what the Spec and Paths say: memory and current memory are
//     the Spec's, the vCPU count and topology are the Spec's, the name is
//     the Spec's, the emulator is Paths.Emulator or else the node's;
//   - every disk's source is one the runtime gave (root disk, cloud-init
//     seed, a volume's device), each volume once, with its serial; every
//     qcow2 disk's backing chain names only Paths.BaseDisk and ends with an
//     empty <backingStore/>, so libvirt probes no backing file of its own;
//     disk targets and serials are unique, serials at most 20 characters;
//   - a kernel, initrd, console socket and tap come from Paths.
func FuzzDomainXML(f *testing.F) {
	f.Add(vmspec.AnnotationFirmware, "uefi", "2", "1Gi", true, uint8(0))
	f.Add(vmspec.AnnotationBoot, "disk", "1", "256Mi", false, uint8(layoutRawBase|layoutVolumes))
	f.Add(vmspec.AnnotationDiskBus, "scsi", "4", "512Mi", false, uint8(layoutNoKernel|layoutVolumes|layoutNoEmulator))
	f.Add(vmspec.AnnotationCloudInitUserData, "#cloud-config", "300m", "64Mi", true, uint8(layoutNoRootDisk|layoutNoGuestAgent))
	f.Add(vmspec.AnnotationNetwork, "none", "1", "128Mi", false, uint8(layoutNoEmulatorEnv|layoutNoRootDisk))
	f.Add(vmspec.AnnotationConsole, "off", "255", "1Ti", true, uint8(layoutNoKernel|layoutNoRootDisk))
	f.Fuzz(func(t *testing.T, key, value, cpu, mem string, kvm bool, layout uint8) {
		pod := MakePod("fuzz")
		if layout&layoutVolumes != 0 {
			pod.BlockVolume("data", "c1", "/dev/data").BlockVolume("logs", "c2", "/dev/disks/logs")
		}
		s, h, ok := fuzzedSpec(t, pod, key, value, cpu, mem, kvm)
		if !ok {
			return
		}
		p := layoutPaths(s, layout)
		d, err := convert.Domain(s, h, p)
		if err != nil {
			if !errdefs.IsFailedPrecondition(err) {
				t.Fatalf("Domain error is not FailedPrecondition: %v", err)
			}
			return
		}
		xml1, err := d.Marshal()
		if err != nil {
			t.Fatalf("Marshal: %v", err)
		}
		var back libvirtxml.Domain
		if err := back.Unmarshal(xml1); err != nil {
			t.Fatalf("Unmarshal of our own XML: %v\n%s", err, xml1)
		}
		xml2, err := back.Marshal()
		if err != nil {
			t.Fatalf("Marshal after Unmarshal: %v", err)
		}
		if diff := cmp.Diff(xml1, xml2); diff != "" {
			t.Fatalf("XML changed through Unmarshal and Marshal (-first +second):\n%s", diff)
		}
		if diff := cmp.Diff(d, &back, readBack...); diff != "" {
			t.Fatalf("domain read back differs from the one converted (-converted +read):\n%s", diff)
		}
		if err := checkDomain(&back, s, h, p); err != nil {
			t.Fatalf("%v\n%s", err, xml1)
		}
	})
}

// readBack is what libvirtxml does not keep through Marshal and
// Unmarshal, and nothing else: it fills in the element names (XMLName) it
// read, gives a usb controller an empty USB and an empty <backingStore/>
// an empty Source, all of which marshal as nothing.
var readBack = []cmp.Option{
	cmpopts.IgnoreTypes(xml.Name{}),
	nilIsEmpty[libvirtxml.DomainControllerUSB](),
	nilIsEmpty[libvirtxml.DomainDiskSource](),
}

// nilIsEmpty compares *T values with nil equal to a pointer to T's zero value.
func nilIsEmpty[T any]() cmp.Option {
	return cmp.Comparer(func(a, b *T) bool {
		var zero T
		if a == nil {
			a = &zero
		}
		if b == nil {
			b = &zero
		}
		return cmp.Equal(a, b, cmpopts.IgnoreTypes(xml.Name{}))
	})
}

// layoutPaths is paths() changed as layout says, with a device for each
// of the Spec's volumes.
func layoutPaths(s vmspec.Spec, layout uint8) convert.Paths {
	p := paths()
	if layout&layoutNoKernel != 0 {
		p.Kernel, p.Initrd = "", ""
	}
	if layout&layoutNoRootDisk != 0 {
		p.RootDisk, p.BaseDisk, p.BaseFormat = "", "", ""
	}
	if layout&layoutRawBase != 0 && p.BaseDisk != "" {
		p.BaseDisk, p.BaseFormat = state+"/rootfs/disk/disk.img", "raw"
	}
	if layout&layoutNoEmulator != 0 {
		p.Emulator, p.EmulatorEnv = "", nil
	}
	if layout&layoutNoGuestAgent != 0 {
		p.GuestAgent = ""
	}
	if layout&layoutNoEmulatorEnv != 0 {
		p.EmulatorEnv = nil
	}
	p.Volumes = map[string]string{}
	for _, v := range s.Volumes {
		p.Volumes[v.Name] = state + "/vm/dev/" + v.Name
	}
	return p
}

// checkDomain reports the first way d does not say what s, h and p say.
func checkDomain(d *libvirtxml.Domain, s vmspec.Spec, h host.Host, p convert.Paths) error {
	if d.Name != s.Name {
		return fmt.Errorf("name %q, want %q", d.Name, s.Name)
	}
	if d.Memory == nil || d.Memory.Unit != "KiB" || uint64(d.Memory.Value)<<10 != s.MemoryBytes {
		return fmt.Errorf("memory %+v, want %d bytes", d.Memory, s.MemoryBytes)
	}
	if d.CurrentMemory == nil || d.CurrentMemory.Unit != "KiB" || uint64(d.CurrentMemory.Value)<<10 != s.MemoryBytes {
		return fmt.Errorf("current memory %+v, want %d bytes", d.CurrentMemory, s.MemoryBytes)
	}
	if d.VCPU == nil || d.VCPU.Value != uint(s.VCPUs) {
		return fmt.Errorf("vcpu %+v, want %d", d.VCPU, s.VCPUs)
	}
	if d.CPU == nil || d.CPU.Topology == nil {
		return fmt.Errorf("no CPU topology")
	}
	if tp := d.CPU.Topology; tp.Sockets*tp.Dies*tp.Cores*tp.Threads != s.VCPUs {
		return fmt.Errorf("topology %+v is not %d vCPUs", tp, s.VCPUs)
	}
	emulator := h.Emulator
	if p.Emulator != "" {
		emulator = p.Emulator
	}
	if d.Devices.Emulator != emulator {
		return fmt.Errorf("emulator %q, want %q (Paths.Emulator %q, the node's %q)", d.Devices.Emulator, emulator, p.Emulator, h.Emulator)
	}
	if d.OS.Kernel != "" && d.OS.Kernel != p.Kernel || d.OS.Initrd != "" && d.OS.Initrd != p.Initrd {
		return fmt.Errorf("kernel %q and initrd %q are not the image's", d.OS.Kernel, d.OS.Initrd)
	}

	given := map[string]bool{}
	for _, f := range []string{p.RootDisk, p.CloudInitISO} {
		if f != "" {
			given[f] = true
		}
	}
	for _, f := range p.Volumes {
		given[f] = true
	}
	targets, serials := map[string]bool{}, map[string]bool{}
	bySource := map[string]libvirtxml.DomainDisk{}
	for i, disk := range d.Devices.Disks {
		src := diskSource(disk.Source)
		if !given[src] {
			return fmt.Errorf("disk %d: source %q is not one the runtime gave", i, src)
		}
		if _, dup := bySource[src]; dup {
			return fmt.Errorf("disk %d: source %q attached twice", i, src)
		}
		bySource[src] = disk
		if disk.Target == nil || targets[disk.Target.Dev] {
			return fmt.Errorf("disk %d: target %+v missing or used twice", i, disk.Target)
		}
		targets[disk.Target.Dev] = true
		if disk.Serial != "" {
			if serials[disk.Serial] || len(disk.Serial) > vmspec.MaxSerialLen {
				return fmt.Errorf("disk %d: serial %q used twice or longer than %d", i, disk.Serial, vmspec.MaxSerialLen)
			}
			serials[disk.Serial] = true
		}
		if disk.Driver != nil && disk.Driver.Type == "qcow2" {
			if err := checkBackingChain(disk.BackingStore, p.BaseDisk, p.BaseFormat); err != nil {
				return fmt.Errorf("disk %d (%s): %v", i, src, err)
			}
		} else if disk.BackingStore != nil && diskSource(disk.BackingStore.Source) != "" {
			return fmt.Errorf("disk %d (%s): a %v disk with a backing file", i, src, disk.Driver)
		}
	}
	if p.RootDisk != "" {
		if _, ok := bySource[p.RootDisk]; !ok {
			return fmt.Errorf("the root disk %q is not attached", p.RootDisk)
		}
	}
	for _, v := range s.Volumes {
		disk, ok := bySource[p.Volumes[v.Name]]
		if !ok || disk.Serial != v.Serial {
			return fmt.Errorf("volume %q: want one disk %q with serial %q", v.Name, p.Volumes[v.Name], v.Serial)
		}
	}
	if (s.CloudInit != nil) != (bySource[p.CloudInitISO].Source != nil) {
		return fmt.Errorf("cloud-init is %v, and the seed disk attached is not", s.CloudInit != nil)
	}

	if len(d.Devices.Interfaces) != len(s.NICs) {
		return fmt.Errorf("%d interfaces, want %d", len(d.Devices.Interfaces), len(s.NICs))
	}
	for i, n := range s.NICs {
		iface := d.Devices.Interfaces[i]
		if iface.Target == nil || iface.Target.Dev != p.NICs[n.Name].Tap || iface.MAC == nil || iface.MAC.Address != p.NICs[n.Name].MAC {
			return fmt.Errorf("interface %d: %+v is not the tap and MAC of %q", i, iface, n.Name)
		}
	}
	var sockets []string
	for _, c := range d.Devices.Serials {
		sockets = append(sockets, c.Source.UNIX.Path)
	}
	if s.Console && !slices.Equal(sockets, []string{p.Console}) || !s.Console && len(sockets) > 0 {
		return fmt.Errorf("serial sockets %q, console %v at %q", sockets, s.Console, p.Console)
	}
	if d.OS.Cmdline != "" && !strings.HasSuffix(d.OS.Cmdline, s.Boot.Cmdline) {
		return fmt.Errorf("kernel command line %q does not end with the pod's %q", d.OS.Cmdline, s.Boot.Cmdline)
	}
	return nil
}

// checkBackingChain: every layer below an overlay is the base the runtime
// named, in its format, and the chain ends with an empty <backingStore/>.
func checkBackingChain(b *libvirtxml.DomainDiskBackingStore, base, format string) error {
	for depth := 0; ; depth++ {
		switch {
		case b == nil:
			return fmt.Errorf("backing chain ends at depth %d without an empty <backingStore/>", depth)
		case cmp.Equal(b, &libvirtxml.DomainDiskBackingStore{}, readBack...):
			return nil
		case diskSource(b.Source) != base || b.Format == nil || b.Format.Type != format:
			return fmt.Errorf("backing store at depth %d is %q (%v), want %q (%s)", depth, diskSource(b.Source), b.Format, base, format)
		}
		b = b.BackingStore
	}
}

func diskSource(src *libvirtxml.DomainDiskSource) string {
	switch {
	case src == nil:
		return ""
	case src.File != nil:
		return src.File.File
	case src.Block != nil:
		return src.Block.Dev
	}
	return ""
}
