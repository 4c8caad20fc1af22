package convert_test

import (
	"testing"

	"github.com/vmpod/vmpod/internal/testenv/hostcaps"
	"github.com/vmpod/vmpod/pkg/convert"
	"github.com/vmpod/vmpod/pkg/host"
	"github.com/vmpod/vmpod/pkg/vmspec"
	. "github.com/vmpod/vmpod/pkg/vmspec/vmspectest"
)

// TestDefaultMaxVCPUs: a VM whose pod set no maximum gets room up to the
// node's CPUs and the node's cap, except where it cannot grow live; and
// the room it gets is room Domain makes, with the pod's vCPUs the ones
// the guest boots with.
func TestDefaultMaxVCPUs(t *testing.T) {
	tcg, kvm := hostcaps.Golden[host.Host](t, hostcaps.TCG), hostcaps.Golden[host.Host](t, hostcaps.KVM)
	on := func(h host.Host, cpus, qemuMax int) host.Host {
		h.CPUs = cpus
		if qemuMax > 0 {
			h.MaxVCPUs = qemuMax
		}
		return h
	}
	kernel := paths()
	disk := paths()
	disk.Kernel, disk.Initrd = "", ""
	pod := func(cpu string, annotations ...string) *PodWrapper {
		p := MakePod("guest").CPU(cpu).Memory("256Mi")
		for i := 0; i+1 < len(annotations); i += 2 {
			p.Annotation(annotations[i], annotations[i+1])
		}
		return p
	}
	tests := []struct {
		name string
		pod  *PodWrapper
		h    host.Host
		p    convert.Paths
		upTo int
		want int
	}{
		{"KVM, disk boot: the node's CPUs", pod("1"), on(kvm, 2, 0), disk, 4, 2},
		{"KVM: the cap below the node's CPUs", pod("1"), on(kvm, 64, 0), disk, 4, 4},
		{"KVM: no CPU count from libvirt, the cap", pod("2"), on(kvm, 0, 0), disk, 4, 4},
		{"TCG, kernel boot", pod("1"), on(tcg, 8, 0), kernel, 4, 4},
		{"TCG, a fraction of a CPU", pod("300m"), on(tcg, 2, 0), kernel, 4, 2},
		{"TCG, disk boot: none", pod("1"), on(tcg, 8, 0), disk, 4, 0},
		{"TCG asked on a KVM node, disk boot: none", pod("1", vmspec.AnnotationAccel, "tcg"), on(kvm, 8, 0), disk, 4, 0},
		{"TCG asked on a KVM node, kernel boot", pod("1", vmspec.AnnotationAccel, "tcg"), on(kvm, 8, 0), kernel, 4, 4},
		{"as many vCPUs as the node has: none", pod("2"), on(kvm, 2, 0), disk, 4, 0},
		{"more vCPUs than the default: none", pod("6"), on(kvm, 8, 0), disk, 4, 0},
		{"the pod's own maximum stands", pod("1", vmspec.AnnotationMaxVCPUs, "3"), on(kvm, 8, 0), disk, 4, 0},
		{"a maximum equal to the vCPUs opts out", pod("1", vmspec.AnnotationMaxVCPUs, "1"), on(kvm, 8, 0), disk, 4, 0},
		{"the node turned the default off", pod("1"), on(kvm, 8, 0), disk, 0, 0},
		{"QEMU's own limit", pod("1"), on(kvm, 8, 3), disk, 4, 3},
		{"a node that cannot run it: none", pod("1", vmspec.AnnotationAccel, "kvm"), on(tcg, 8, 0), kernel, 4, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := vmspec.FromPod(tt.pod.Obj())
			if err != nil {
				t.Fatal(err)
			}
			got := convert.DefaultMaxVCPUs(s, tt.h, tt.p, tt.upTo)
			if got != tt.want {
				t.Fatalf("DefaultMaxVCPUs = %d, want %d", got, tt.want)
			}
			if got == 0 {
				return
			}
			s.MaxVCPUs = got
			d, err := convert.Domain(s, tt.h, tt.p)
			if err != nil {
				t.Fatalf("Domain refuses the VM with its default room: %v", err)
			}
			if d.VCPU.Value != uint(got) || bootVCPUs(d, s.VCPUs) != s.VCPUs {
				t.Errorf("the domain has room for %d vCPUs and boots %d; want room for %d and %d at boot",
					d.VCPU.Value, bootVCPUs(d, s.VCPUs), got, s.VCPUs)
			}
		})
	}
}
