package libvirt

import (
	"context"
	"testing"

	"github.com/containerd/errdefs"
	"libvirt.org/go/libvirtxml"

	"github.com/vmpod/vmpod/pkg/virt"
)

// The test driver keeps <vcpu current> live, so plugging is checked for
// real here; virtio-mem needs QEMU (pkg/vm's resize test).
func TestPlugVCPUsOnTestDriver(t *testing.T) {
	ctx := context.Background()
	c := openTest(t)
	name := defineTestDomain(t, c, func(dom *libvirtxml.Domain) {
		dom.VCPU = &libvirtxml.DomainVCPU{Current: 1, Value: 3}
	})
	if _, err := c.Size(ctx, name); !errdefs.IsFailedPrecondition(err) {
		t.Fatalf("Size of a stopped domain: %v, want FailedPrecondition", err)
	}
	if err := c.PlugVCPUs(ctx, name, 2); !errdefs.IsFailedPrecondition(err) {
		t.Fatalf("PlugVCPUs into a stopped domain: %v, want FailedPrecondition", err)
	}
	if err := c.Start(ctx, name, virt.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	want := func(vcpus int) {
		t.Helper()
		got, err := c.Size(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if w := (virt.Size{VCPUs: vcpus, MaxVCPUs: 3}); got != w {
			t.Fatalf("Size = %+v, want %+v", got, w)
		}
	}
	want(1)
	if err := c.PlugVCPUs(ctx, name, 3); err != nil {
		t.Fatal(err)
	}
	want(3)
	// Fewer than plugged: nothing to do, nothing unplugged.
	if err := c.PlugVCPUs(ctx, name, 2); err != nil {
		t.Fatal(err)
	}
	want(3)
	for _, n := range []int{0, 4} {
		if err := c.PlugVCPUs(ctx, name, n); !errdefs.IsInvalidArgument(err) {
			t.Errorf("PlugVCPUs(%d): %v, want InvalidArgument", n, err)
		}
	}
	if err := c.RequestHotplugMemory(ctx, name, 2<<20); !errdefs.IsInvalidArgument(err) {
		t.Errorf("RequestHotplugMemory without virtio-mem: %v, want InvalidArgument", err)
	}
}

// TestSizeOfLiveDefinition: what Size reads from a live definition: the
// vCPUs plugged of the room, the virtio-mem device's request and
// plugged blocks, and the DIMMs in their slots.
func TestSizeOfLiveDefinition(t *testing.T) {
	for _, tt := range []struct {
		name, x string
		want    virt.Size
	}{
		{"virtio-mem", `<domain type="qemu"><name>d</name><memory unit="KiB">262144</memory>
  <vcpu placement="static" current="2">4</vcpu>
  <devices><memory model="virtio-mem"><target><size unit="KiB">262144</size><node>0</node>
    <block unit="KiB">2048</block><requested unit="KiB">131072</requested><current unit="KiB">65536</current>
  </target></memory></devices></domain>`,
			virt.Size{VCPUs: 2, MaxVCPUs: 4, HotplugRequestedBytes: 128 << 20, HotplugPluggedBytes: 64 << 20, HotplugMaxBytes: 256 << 20}},
		{"DIMMs", `<domain type="qemu"><name>d</name><maxMemory slots="3" unit="KiB">655360</maxMemory><memory unit="KiB">524288</memory>
  <vcpu placement="static">1</vcpu>
  <devices>
    <memory model="dimm"><target><size unit="KiB">131072</size><node>0</node></target><alias name="dimm0"/></memory>
    <memory model="dimm"><target><size unit="KiB">131072</size><node>0</node></target><alias name="dimm1"/></memory>
  </devices></domain>`,
			virt.Size{VCPUs: 1, MaxVCPUs: 1, HotplugPluggedBytes: 256 << 20, DIMMs: 2, DIMMSlots: 3, DIMMBytes: 256 << 20}},
	} {
		var dom libvirtxml.Domain
		if err := dom.Unmarshal(tt.x); err != nil {
			t.Fatal(err)
		}
		got, err := sizeOf(&dom, tt.x)
		if err != nil {
			t.Fatal(err)
		}
		if got != tt.want {
			t.Errorf("%s: sizeOf = %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

// DIMMs on the test driver: argument and state errors are ours; the
// plug itself, where the driver lacks it, is NotImplemented (pkg/vm's
// resize test plugs real DIMMs into QEMU).
func TestDIMMsOnTestDriver(t *testing.T) {
	ctx := context.Background()
	c := openTest(t)
	name := defineTestDomain(t, c, func(dom *libvirtxml.Domain) {
		dom.Memory = &libvirtxml.DomainMemory{Value: 262144, Unit: "KiB"}
		dom.CurrentMemory = nil
		dom.MaximumMemory = &libvirtxml.DomainMaxMemory{Value: 524288, Unit: "KiB", Slots: 2}
		dom.VCPU = &libvirtxml.DomainVCPU{Value: 1}
		dom.CPU = &libvirtxml.DomainCPU{Numa: &libvirtxml.DomainNuma{Cell: []libvirtxml.DomainCell{
			{ID: new(uint), CPUs: "0", Memory: 262144, Unit: "KiB"}}}}
	})
	if err := c.PlugDIMM(ctx, name, 128<<20); !errdefs.IsFailedPrecondition(err) {
		t.Fatalf("PlugDIMM into a stopped domain: %v, want FailedPrecondition", err)
	}
	if err := c.UnplugDIMM(ctx, name); !errdefs.IsFailedPrecondition(err) {
		t.Fatalf("UnplugDIMM from a stopped domain: %v, want FailedPrecondition", err)
	}
	if err := c.Start(ctx, name, virt.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Size(ctx, name); err != nil || got.DIMMSlots != 2 || got.DIMMs != 0 {
		t.Fatalf("Size = %+v, %v; want 2 free DIMM slots", got, err)
	}
	if err := c.PlugDIMM(ctx, name, 128<<20+1); !errdefs.IsInvalidArgument(err) {
		t.Errorf("PlugDIMM of a part MiB: %v, want InvalidArgument", err)
	}
	if err := c.UnplugDIMM(ctx, name); !errdefs.IsNotFound(err) {
		t.Errorf("UnplugDIMM with none plugged: %v, want NotFound", err)
	}
	err := c.PlugDIMM(ctx, name, 128<<20)
	t.Logf("PlugDIMM on the test driver: %v", err)
	if err != nil && !errdefs.IsNotImplemented(err) {
		t.Fatalf("PlugDIMM: %v, want nil or NotImplemented", err)
	}
}
