package vmplacement

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/vmpod/vmpod/pkg/vmspec"
	. "github.com/vmpod/vmpod/pkg/vmspec/vmspectest"
)

// TestFootprintCountsShares: a VM's virtio-fs shares add vmspec's shares'
// part to its footprint under either accelerator, for its pod cgroup
// holds their file servers; a VM without shares costs the model alone.
func TestFootprintCountsShares(t *testing.T) {
	const guest = int64(1) << 30
	for _, kvm := range []bool{false, true} {
		alone := guest + int64(vmspec.OverheadFor(kvm).Bytes(uint64(guest), 1))
		if got := vmFootprint(guest, 1, 0, kvm); got != alone {
			t.Errorf("kvm=%v: footprint without shares %d MiB, want guest RAM + overhead, %d MiB", kvm, got>>20, alone>>20)
		}
		want := alone + int64(vmspec.SharesOverheadBytes(uint64(guest), 3))
		if got := vmFootprint(guest, 1, 3, kvm); got != want || got <= alone {
			t.Errorf("kvm=%v: footprint with 3 shares %d MiB, want %d MiB", kvm, got>>20, want>>20)
		}
	}
}

// TestVMSizeFollowsResize: a VM pod is counted at the larger of the guest
// RAM its spec asks for and the RAM its status says the VM has, so a
// shrink not applied yet is still counted; and at its most vCPUs.
func TestVMSizeFollowsResize(t *testing.T) {
	pod := MakePod("vm").CPU("1").Memory("256Mi").
		Annotation(vmspec.AnnotationMaxVCPUs, "4").Annotation(vmspec.AnnotationMaxMemory, "1Gi").Obj()
	spec, err := vmspec.FromPod(pod)
	if err != nil {
		t.Fatal(err)
	}
	status := func(mem string) {
		pod.Status.ContainerStatuses = []v1.ContainerStatus{{Name: "vm",
			Resources: &v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceMemory: resource.MustParse(mem)}}}}
	}
	for _, tc := range []struct {
		status string // "" for none yet
		want   int64
	}{{"", 256 << 20}, {"512Mi", 512 << 20}, {"128Mi", 256 << 20}} {
		pod.Status.ContainerStatuses = nil
		if tc.status != "" {
			status(tc.status)
		}
		guest, vcpus := vmSize(pod, spec)
		if guest != tc.want || vcpus != 4 {
			t.Errorf("status %q: counted at %d MiB and %d vCPUs, want %d MiB and 4", tc.status, guest>>20, vcpus, tc.want>>20)
		}
	}
}
