package vmplacement_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/vmpod/vmpod/pkg/vmspec"
	"github.com/vmpod/vmpod/pkg/vmspec/vmspectest"
)

// hints returns the plugin's queueing hint for each event it registers.
func hints(t *testing.T) map[fwk.ClusterEvent]fwk.QueueingHintFn {
	t.Helper()
	f := newTestFramework(t, "", nil, nil)
	events, err := f.plugin(t).(fwk.EnqueueExtensions).EventsToRegister(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	m := map[fwk.ClusterEvent]fwk.QueueingHintFn{}
	for _, e := range events {
		m[e.Event] = e.QueueingHintFn
	}
	return m
}

func TestEventsToRegister(t *testing.T) {
	var got []fwk.ClusterEvent
	for e := range hints(t) {
		got = append(got, e)
	}
	want := []fwk.ClusterEvent{
		{Resource: fwk.Node, ActionType: fwk.Add | fwk.UpdateNodeLabel | fwk.UpdateNodeAllocatable},
		{Resource: fwk.AssignedPod, ActionType: fwk.Delete},
		{Resource: fwk.AssignedPod, ActionType: fwk.Update},
		{Resource: fwk.TargetPod, ActionType: fwk.Update},
	}
	less := func(a, b fwk.ClusterEvent) bool { return a.Label() < b.Label() }
	if diff := cmp.Diff(want, got, cmpopts.SortSlices(less)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

func TestQueueingHints(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	h := hints(t)
	nodeEvent := h[fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Add | fwk.UpdateNodeLabel | fwk.UpdateNodeAllocatable}]
	podDelete := h[fwk.ClusterEvent{Resource: fwk.AssignedPod, ActionType: fwk.Delete}]
	podUpdate := h[fwk.ClusterEvent{Resource: fwk.TargetPod, ActionType: fwk.Update}]
	assignedUpdate := h[fwk.ClusterEvent{Resource: fwk.AssignedPod, ActionType: fwk.Update}]
	// A VM pod on the node before and after a memory resize applied: its
	// status shows what the VM has.
	resized := func(mem string) *v1.Pod {
		p := defaulted(vmspectest.MakePod("old").NodeName("n").Memory(mem).Annotation(vmspec.AnnotationMaxMemory, "1Gi").Obj())
		p.Status.ContainerStatuses = []v1.ContainerStatus{{Name: "vm",
			Resources: &v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceMemory: resource.MustParse(mem)}}}}
		return p
	}

	kvmPod := defaulted(vmspectest.MakePod("p").Annotation(vmspec.AnnotationAccel, "kvm").Obj())
	tcgNode := makeNode("n").Obj()
	kvmNode := makeNode("n").KVM().Obj()
	biggerKVMNode := makeNode("n").KVM().Memory("32Gi").Obj()
	relabelledKVMNode := makeNode("n").KVM().Label("team", "a").Obj()

	tests := []struct {
		name     string
		hint     fwk.QueueingHintFn
		pod      *v1.Pod
		old, new any
		want     fwk.QueueingHint
	}{
		{name: "KVM node added", hint: nodeEvent, pod: kvmPod, new: kvmNode, want: fwk.Queue},
		{name: "TCG node added", hint: nodeEvent, pod: kvmPod, new: tcgNode, want: fwk.QueueSkip},
		{name: "node gains KVM", hint: nodeEvent, pod: kvmPod, old: tcgNode, new: kvmNode, want: fwk.Queue},
		{name: "KVM node gains memory", hint: nodeEvent, pod: kvmPod, old: kvmNode, new: biggerKVMNode, want: fwk.Queue},
		{name: "KVM node gets an unrelated label", hint: nodeEvent, pod: kvmPod, old: kvmNode, new: relabelledKVMNode, want: fwk.QueueSkip},
		{name: "node added, pod not a VM pod", hint: nodeEvent, pod: plainPod("p", "1Gi"), new: kvmNode, want: fwk.QueueSkip},

		{name: "VM pod deleted", hint: podDelete, pod: kvmPod, old: defaulted(vmspectest.MakePod("old").NodeName("n").Obj()), want: fwk.Queue},
		{name: "pod with memory deleted", hint: podDelete, pod: kvmPod, old: plainPod("old", "1Gi"), want: fwk.Queue},
		{name: "pod without memory deleted", hint: podDelete, pod: kvmPod, old: plainPod("old", "0"), want: fwk.QueueSkip},

		{name: "VM pod on the node shrunk", hint: assignedUpdate, pod: kvmPod, old: resized("512Mi"), new: resized("256Mi"), want: fwk.Queue},
		{name: "VM pod on the node grew", hint: assignedUpdate, pod: kvmPod, old: resized("256Mi"), new: resized("512Mi"), want: fwk.QueueSkip},
		{name: "pod on the node relabelled", hint: assignedUpdate, pod: kvmPod, old: resized("256Mi"), new: withLabel(resized("256Mi"), "team", "a"), want: fwk.QueueSkip},
		{name: "pod on the node shrunk, pod not a VM pod", hint: assignedUpdate, pod: plainPod("p", "1Gi"), old: resized("512Mi"), new: resized("256Mi"), want: fwk.QueueSkip},

		{
			name: "accel annotation changed", hint: podUpdate, pod: kvmPod,
			old: kvmPod, new: defaulted(vmspectest.MakePod("p").Annotation(vmspec.AnnotationAccel, "auto").Obj()),
			want: fwk.Queue,
		},
		{
			name: "invalid pod fixed", hint: podUpdate, pod: kvmPod,
			old: vmspectest.MakePod("p").Annotation(vmspec.AnnotationAccel, "fast").Obj(), new: kvmPod,
			want: fwk.Queue,
		},
		{
			name: "unrelated label changed", hint: podUpdate, pod: kvmPod,
			old: kvmPod, new: withLabel(kvmPod, "team", "a"),
			want: fwk.QueueSkip,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.hint(logger, tc.pod, tc.old, tc.new)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("hint = %v, want %v", got, tc.want)
			}
		})
	}
}

func withLabel(p *v1.Pod, k, v string) *v1.Pod {
	p = p.DeepCopy()
	if p.Labels == nil {
		p.Labels = map[string]string{}
	}
	p.Labels[k] = v
	return p
}
