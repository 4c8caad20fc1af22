package convert_test

import (
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"libvirt.org/go/libvirtxml"

	"github.com/vmpod/vmpod/internal/testenv/hostcaps"
	"github.com/vmpod/vmpod/pkg/convert"
	"github.com/vmpod/vmpod/pkg/host"
	"github.com/vmpod/vmpod/pkg/vmspec"
	. "github.com/vmpod/vmpod/pkg/vmspec/vmspectest"
)

// domainFor converts pod on the TCG golden host with paths edited.
func domainFor(t *testing.T, pod *PodWrapper, edit func(*convert.Paths)) *libvirtxml.Domain {
	t.Helper()
	s, err := vmspec.FromPod(pod.Obj())
	if err != nil {
		t.Fatal(err)
	}
	p := paths()
	if edit != nil {
		edit(&p)
	}
	d, err := convert.Domain(s, hostcaps.Golden[host.Host](t, hostcaps.TCG), p)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// Restored keeps the saved guest's hardware and identity (name, UUID,
// MAC, addresses) and takes every host path and tap from this node's
// definition of the same spec.
func TestRestored(t *testing.T) {
	pod := MakePod("guest").CPU("1").Memory("256Mi").BlockVolume("data", "data-claim", "/dev/data")
	const other = "/var/lib/vmpod/pods/ffffeeee"
	saved := domainFor(t, pod, func(p *convert.Paths) {
		r := strings.NewReplacer(state, other)
		p.Kernel, p.Initrd, p.RootDisk, p.BaseDisk = r.Replace(p.Kernel), r.Replace(p.Initrd), r.Replace(p.RootDisk), r.Replace(p.BaseDisk)
		p.CloudInitISO, p.NVRAM, p.Console, p.GuestAgent = r.Replace(p.CloudInitISO), r.Replace(p.NVRAM), r.Replace(p.Console), r.Replace(p.GuestAgent)
		p.Volumes = map[string]string{"data": other + "/vm/dev/data"}
		p.NICs = map[string]convert.NIC{"eth0": {Tap: "other0", MAC: "0a:58:0a:f4:00:99", MTU: 1450}}
		p.Emulator, p.EmulatorEnv = "/opt/vmpod/bin/vmpod-qemu", []string{"VMPOD_JAIL=" + other + "/jail.json"}
	})
	// What a running domain's definition has on top.
	id := 7
	saved.ID, saved.UUID = &id, "7d3b1c70-5d0e-4a57-9d1e-0c2f6f1f2a11"
	saved.Devices.Interfaces[0].Alias = &libvirtxml.DomainAlias{Name: "net0"}
	savedXML, err := saved.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	fresh := domainFor(t, pod, nil)

	x, err := convert.Restored(savedXML, fresh)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(x, other) || strings.Contains(x, "/opt/vmpod") || strings.Contains(x, "other0") {
		t.Errorf("the restored definition names the saving node's paths or tap:\n%s", x)
	}
	var got libvirtxml.Domain
	if err := got.Unmarshal(x); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ what, got, want string }{
		{"UUID", got.UUID, saved.UUID},
		{"name", got.Name, saved.Name},
		{"MAC", got.Devices.Interfaces[0].MAC.Address, "0a:58:0a:f4:00:99"},
		{"interface alias", got.Devices.Interfaces[0].Alias.Name, "net0"},
		{"tap", got.Devices.Interfaces[0].Target.Dev, "vmpod0"},
		{"emulator", got.Devices.Emulator, "/var/lib/vmpod/bin/vmpod-qemu"},
		{"jail", got.QEMUCommandline.Envs[0].Value, state + "/jail.json"},
		{"kernel", got.OS.Kernel, state + "/rootfs/boot/vmlinux"},
		{"root disk", got.Devices.Disks[0].Source.File.File, state + "/vm/disk.qcow2"},
		{"base disk", got.Devices.Disks[0].BackingStore.Source.File.File, state + "/rootfs/disk/disk.qcow2"},
		{"volume", got.Devices.Disks[1].Source.Block.Dev, state + "/vm/dev/data"},
		{"console", got.Devices.Serials[0].Source.UNIX.Path, state + "/vm/console.sock"},
		{"agent", got.Devices.Channels[0].Source.UNIX.Path, state + "/vm/qga.sock"},
	} {
		if c.got != c.want {
			t.Errorf("%s: %q, want %q", c.what, c.got, c.want)
		}
	}
	if got.ID != nil {
		t.Errorf("the saved process's id %d is kept", *got.ID)
	}

	// Another spec here: a disk or a NIC fewer.
	noNIC := domainFor(t, pod, nil)
	noNIC.Devices.Interfaces = nil
	for name, fresh := range map[string]*libvirtxml.Domain{
		"a volume fewer": domainFor(t, MakePod("guest").CPU("1").Memory("256Mi"), nil),
		"no network":     noNIC,
	} {
		if _, err := convert.Restored(savedXML, fresh); !errdefs.IsInvalidArgument(err) {
			t.Errorf("%s: %v, want InvalidArgument", name, err)
		}
	}
	if _, err := convert.Restored("<domain", fresh); !errdefs.IsInvalidArgument(err) {
		t.Errorf("a broken saved definition: %v, want InvalidArgument", err)
	}
}

// SavedMachine reads the versioned machine type out of a saved definition.
func TestSavedMachine(t *testing.T) {
	d := domainFor(t, MakePod("m").CPU("1").Memory("256Mi"), nil)
	d.OS.Type.Machine = "pc-q35-7.2" // as libvirt writes it once it ran
	x, err := d.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if m, err := convert.SavedMachine(x); err != nil || m != "pc-q35-7.2" {
		t.Errorf("SavedMachine = %q, %v; want pc-q35-7.2", m, err)
	}
	d.OS.Type.Machine = ""
	if x, err = d.Marshal(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{x, "<domain", ""} {
		if _, err := convert.SavedMachine(bad); !errdefs.IsInvalidArgument(err) {
			t.Errorf("SavedMachine(%.40q): %v, want InvalidArgument", bad, err)
		}
	}
}
