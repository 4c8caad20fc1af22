package libvirt

import (
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"libvirt.org/go/libvirtxml"

	"github.com/vmpod/vmpod/pkg/virt"
)

// A domain as vmpod defines one: its overlay over a read-only base, a
// cloud-init seed and a block volume.
const stateDomain = `<domain type="qemu"><name>d</name><memory unit="KiB">262144</memory><vcpu>1</vcpu>
  <devices>
    <disk type="file" device="disk"><driver name="qemu" type="qcow2"/><source file="/s/vm/disk.qcow2"/>
      <backingStore type="file"><format type="raw"/><source file="/img/disk.raw"/><backingStore/></backingStore>
      <target dev="vda" bus="virtio"/></disk>
    <disk type="file" device="cdrom"><driver name="qemu" type="raw"/><source file="/s/vm/cidata.iso"/>
      <target dev="sda" bus="sata"/><readonly/></disk>
    <disk type="block" device="disk"><source dev="/s/vm/dev/data"/><target dev="vdb" bus="virtio"/></disk>
  </devices></domain>`

func parseDomain(t *testing.T, x string) *libvirtxml.Domain {
	t.Helper()
	var d libvirtxml.Domain
	if err := d.Unmarshal(x); err != nil {
		t.Fatal(err)
	}
	return &d
}

// The snapshot captures the memory and the overlay, onto the top layer,
// and names every other disk snapshot='no', so libvirt makes no layer of
// its own next to the seed or the volume.
func TestSnapshotXML(t *testing.T) {
	dom := parseDomain(t, stateDomain)
	x, err := snapshotXML(dom, virt.SnapshotRequest{StateFile: "/ck/vm.state", Disk: "/s/vm/disk.qcow2", Top: "/s/vm/top.qcow2"})
	if err != nil {
		t.Fatal(err)
	}
	var s libvirtxml.DomainSnapshot
	if err := s.Unmarshal(x); err != nil {
		t.Fatal(err)
	}
	if m := s.Memory; m == nil || m.Snapshot != "external" || m.File != "/ck/vm.state" {
		t.Errorf("memory %+v, want external to /ck/vm.state", m)
	}
	got := map[string]string{}
	for _, d := range s.Disks.Disks {
		got[d.Name] = d.Snapshot
		if d.Name == "vda" && (fileOf(d.Source) != "/s/vm/top.qcow2" || d.Driver == nil || d.Driver.Type != "qcow2") {
			t.Errorf("vda snapshot %+v, want qcow2 on /s/vm/top.qcow2", d)
		}
	}
	want := map[string]string{"vda": "external", "sda": "no", "vdb": "no"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("disk %s snapshot=%q, want %q (all: %v)", k, got[k], v, got)
		}
	}

	// Memory only: every disk stays out.
	x, err = snapshotXML(dom, virt.SnapshotRequest{StateFile: "/ck/vm.state"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(x, "<source") || strings.Count(x, `snapshot="no"`) != 3 {
		t.Errorf("memory-only snapshot %s: want all three disks snapshot=no", x)
	}

	if _, err := snapshotXML(dom, virt.SnapshotRequest{StateFile: "/ck/vm.state", Disk: "/elsewhere.qcow2", Top: "/t"}); !errdefs.IsInvalidArgument(err) {
		t.Errorf("a disk the domain lacks: %v, want InvalidArgument", err)
	}
}

// The commit finds the disk by its top layer and stops right below it,
// never at the image layer under it.
func TestBelowTop(t *testing.T) {
	live := strings.Replace(stateDomain, `<source file="/s/vm/disk.qcow2"/>
      <backingStore type="file"><format type="raw"/>`, `<source file="/s/vm/top.qcow2"/>
      <backingStore type="file"><format type="qcow2"/><source file="/s/vm/disk.qcow2"/><backingStore type="file"><format type="raw"/>`, 1)
	live = strings.Replace(live, `<backingStore/></backingStore>`, `<backingStore/></backingStore></backingStore>`, 1)
	target, base, err := belowTop(parseDomain(t, live), "/s/vm/top.qcow2")
	if err != nil || target != "vda" || base != "/s/vm/disk.qcow2" {
		t.Errorf("belowTop = %q, %q, %v; want vda onto /s/vm/disk.qcow2", target, base, err)
	}
	if target, _, err := belowTop(parseDomain(t, stateDomain), "/s/vm/top.qcow2"); err != nil || target != "" {
		t.Errorf("no disk on the top layer: %q, %v; want none, no error", target, err)
	}
	// A disk on top with nothing below cannot be merged.
	alone := strings.Replace(stateDomain, `<source file="/s/vm/disk.qcow2"/>`, `<source file="/s/vm/top.qcow2"/>`, 1)
	alone = regexp.MustCompile(`(?s)<backingStore type="file">.*</backingStore>`).ReplaceAllString(alone, "<backingStore/>")
	if _, _, err := belowTop(parseDomain(t, alone), "/s/vm/top.qcow2"); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("a top layer with nothing below: %v, want FailedPrecondition", err)
	}
}

// The test driver has no QEMU: state calls are refused as not
// implemented once their arguments and the domain's state pass.
func TestStateOnTestDriver(t *testing.T) {
	ctx := context.Background()
	c := openTest(t)
	name := domainName(t)
	if err := c.Define(ctx, domainXML(t, "test", name, "")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Destroy(ctx, name)
		_ = c.Undefine(ctx, name)
	})
	state := filepath.Join(t.TempDir(), "vm.state")
	snap := virt.SnapshotRequest{StateFile: state}
	if err := c.Snapshot(ctx, name, snap); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("Snapshot of a stopped domain: %v, want FailedPrecondition", err)
	}
	if err := c.Snapshot(ctx, name, virt.SnapshotRequest{}); !errdefs.IsInvalidArgument(err) {
		t.Errorf("Snapshot without a state file: %v, want InvalidArgument", err)
	}
	if err := c.Snapshot(ctx, name, virt.SnapshotRequest{StateFile: state, Disk: "/d.qcow2"}); !errdefs.IsInvalidArgument(err) {
		t.Errorf("Snapshot of a disk without a top layer: %v, want InvalidArgument", err)
	}
	if err := c.Snapshot(ctx, "no-such-domain", snap); !errdefs.IsNotFound(err) {
		t.Errorf("Snapshot of no domain: %v, want NotFound", err)
	}
	if err := c.Restore(ctx, name, state); !errdefs.IsNotImplemented(err) {
		t.Errorf("Restore on the test driver: %v, want NotImplemented", err)
	}
	if err := c.Start(ctx, name, virt.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.Restore(ctx, name, state); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("Restore of a running domain: %v, want FailedPrecondition", err)
	}
	if err := c.Snapshot(ctx, name, snap); !errdefs.IsNotImplemented(err) {
		t.Errorf("Snapshot on the test driver: %v, want NotImplemented", err)
	}
	if err := c.CommitTop(ctx, name, "/t.qcow2"); !errdefs.IsNotImplemented(err) {
		t.Errorf("CommitTop on the test driver: %v, want NotImplemented", err)
	}
	if _, err := c.SavedDefinition(ctx, state); !errdefs.IsNotImplemented(err) {
		t.Errorf("SavedDefinition on the test driver: %v, want NotImplemented", err)
	}
}
