package vmplacement_test

import (
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/vmpod/vmpod/pkg/scheduler/vmplacement"
	"github.com/vmpod/vmpod/pkg/vmspec/vmspectest"
)

// onNode binds pod to node, as a pod author can with spec.nodeName: the
// scheduler's cache counts it without it ever passing a Filter.
func onNode(p *v1.Pod, node string) *v1.Pod {
	p.Spec.NodeName = node
	return p
}

// TestHugeRequestsDoNotWrap: pods whose memory requests are near or above
// the int64 range (8Ei reads as math.MaxInt64 bytes) make a node look full,
// never empty, however many there are and whatever else runs there.
func TestHugeRequestsDoNotWrap(t *testing.T) {
	nodes := []*v1.Node{
		makeNode("one-8ei").Obj(),
		makeNode("two-8ei").Obj(),      // the scheduler's own sum wraps to -2
		makeNode("8ei-and-a-vm").Obj(), // the requests plus the VM's extra would wrap
		makeNode("maxint64").Obj(),
		makeNode("empty").Obj(),
	}
	vm := defaulted(vmspectest.MakePod("running-vm").Memory("1Gi").Obj())
	pods := []*v1.Pod{
		onNode(plainPod("a", "8Ei"), "one-8ei"),
		onNode(plainPod("b", "8Ei"), "two-8ei"),
		onNode(plainPod("c", "8Ei"), "two-8ei"),
		onNode(plainPod("d", "8Ei"), "8ei-and-a-vm"),
		onNode(vm, "8ei-and-a-vm"),
		onNode(plainPod("e", "9223372036854775807"), "maxint64"),
	}
	f := newTestFramework(t, `{"imageLocalityWeight": 0}`, nodes, pods)
	pod := defaulted(vmspectest.MakePod("p").Memory("1Gi").Obj())
	for _, n := range []string{"one-8ei", "two-8ei", "8ei-and-a-vm", "maxint64"} {
		if diff := cmp.Diff(noMemory, f.filter(t, pod, n)); diff != "" {
			t.Errorf("node %s: Filter (-want +got):\n%s", n, diff)
		}
	}
	if diff := cmp.Diff(success, f.filter(t, pod, "empty")); diff != "" {
		t.Errorf("node empty: Filter (-want +got):\n%s", diff)
	}

	// Spread: the empty node is best, every full one scores nothing.
	scores := f.scores(t, pod)
	want := map[string]int64{"empty": fwk.MaxNodeScore, "one-8ei": 0, "two-8ei": 0, "8ei-and-a-vm": 0, "maxint64": 0}
	if diff := cmp.Diff(want, scores); diff != "" {
		t.Errorf("scores (-want +got):\n%s", diff)
	}
}

// TestHugeAllocatableScores: a node reporting math.MaxInt64 bytes of
// allocatable memory scores in range (MaxNodeScore times its free memory
// would overflow int64) and, empty, ranks first under spread.
func TestHugeAllocatableScores(t *testing.T) {
	nodes := []*v1.Node{
		makeNode("huge").MemoryBytes(math.MaxInt64).Obj(),
		makeNode("small").Memory("16Gi").Obj(),
	}
	f := newTestFramework(t, `{"imageLocalityWeight": 0}`, nodes, nil)
	pod := defaulted(vmspectest.MakePod("p").Memory("1Gi").Obj())
	if diff := cmp.Diff(success, f.filter(t, pod, "huge")); diff != "" {
		t.Errorf("Filter (-want +got):\n%s", diff)
	}
	scores := f.scores(t, pod)
	if diff := cmp.Diff([]string{"huge", "small"}, ranking(scores)); diff != "" {
		t.Errorf("ranking (-want +got):\n%s\nscores: %v", diff, scores)
	}
	for n, s := range scores {
		if s < 0 || s > fwk.MaxNodeScore {
			t.Errorf("node %s scored %d, outside 0..%d", n, s, fwk.MaxNodeScore)
		}
	}
}

// TestHugeVMIsRejected: a VM pod above vmspec's maximum guest RAM or vCPU
// count, including one whose quantity would wrap to a small number when
// read as an int64 (2^64 bytes + 1Gi reads as 1Gi), is unschedulable
// everywhere with the vmspec error as the reason.
func TestHugeVMIsRejected(t *testing.T) {
	f := newTestFramework(t, "", []*v1.Node{makeNode("n").MemoryBytes(math.MaxInt64).Obj()}, nil)
	for _, tc := range []struct {
		name string
		pod  *v1.Pod
		want string
	}{
		{"memory 8Ei", vmspectest.MakePod("p").Memory("8Ei").Obj(), "limits.memory"},
		{"memory 2^64+1Gi", vmspectest.MakePod("p").Memory("18446744074783293440").Obj(), "at most 1Ti of guest RAM"},
		{"memory 1e30", vmspectest.MakePod("p").Memory("1e30").Obj(), "at most 1Ti of guest RAM"},
		{"memory just above 1Ti", vmspectest.MakePod("p").Memory("1025Gi").Obj(), "at most 1Ti of guest RAM"},
		{"cpu 8Ei", vmspectest.MakePod("p").CPU("8Ei").Obj(), "limits.cpu: \"9223372036854775807\": at most 255 vCPUs"},
		{"cpu wrapping to 1 vCPU", vmspectest.MakePod("p").CPU("18446744073709552").Obj(), "at most 255 vCPUs"},
		{"cpu 256", vmspectest.MakePod("p").CPU("256").Obj(), "at most 255 vCPUs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := f.filter(t, defaulted(tc.pod), "n")
			if got.Code != fwk.UnschedulableAndUnresolvable.String() || len(got.Reasons) != 1 ||
				!strings.HasPrefix(got.Reasons[0], vmplacement.ErrReasonInvalidVM) || !strings.Contains(got.Reasons[0], tc.want) {
				t.Errorf("Filter = %+v, want UnschedulableAndUnresolvable with %q", got, tc.want)
			}
		})
	}
}
