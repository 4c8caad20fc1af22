package vmplacement_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/vmpod/vmpod/pkg/scheduler/vmplacement"
	"github.com/vmpod/vmpod/pkg/vmspec"
	"github.com/vmpod/vmpod/pkg/vmspec/vmspectest"
)

// TestPreFilterNodes checks which nodes PreFilter names: none (every node)
// when every kind of node can run the VM, when no node that can has
// memory for it, or when those that can are more than half of the nodes;
// else those whose labels can run it and that the pod's node selector
// allows.
func TestPreFilterNodes(t *testing.T) {
	nodes := []*v1.Node{
		makeNode("kvm-a").KVM().Label("pool", "a").Obj(),
		makeNode("kvm-b").KVM().Label("pool", "b").Obj(),
		makeNode("tcg").Obj(),
		makeNode("small").KVM().Memory("512Mi").Obj(),
		makeNode("no-vmpod").Label(vmspec.LabelRuntime, "false").Obj(),
		makeNode("no-vmpod-2").Label(vmspec.LabelRuntime, "false").Obj(),
		makeNode("no-vmpod-3").Label(vmspec.LabelRuntime, "false").Obj(),
	}
	vm := func(name string) *vmspectest.PodWrapper {
		return vmspectest.MakePod(name).UID("uid-" + name).Memory("1Gi")
	}
	withSelector := func(p *v1.Pod, k, v string) *v1.Pod {
		p.Spec.NodeSelector = map[string]string{k: v}
		return p
	}
	tests := []struct {
		name string
		pod  *v1.Pod
		want []string // nil: every node
	}{
		{
			name: "runs anywhere vmpod runs, on 4 of the 7 nodes: too many to name, Filter says why not the others",
			pod:  defaulted(vm("p").Obj()),
		},
		{
			name: "needs KVM, on 3 of the 7 nodes",
			pod:  defaulted(vm("p").Annotation(vmspec.AnnotationAccel, "kvm").Obj()),
			want: []string{"kvm-a", "kvm-b", "small"},
		},
		{
			name: "needs KVM, on pool b",
			pod:  withSelector(defaulted(vm("p").Annotation(vmspec.AnnotationAccel, "kvm").Obj()), "pool", "b"),
			want: []string{"kvm-b"},
		},
		{
			name: "needs KVM, on the pool of the TCG node: fits nowhere, Filter says why",
			pod:  withSelector(defaulted(vm("p").Annotation(vmspec.AnnotationAccel, "kvm").Obj()), "pool", "c"),
		},
		{
			name: "needs KVM and more memory than the KVM node of pool a has left: fits nowhere",
			pod: withSelector(defaulted(vm("p").Annotation(vmspec.AnnotationAccel, "kvm").Memory("16Gi").Obj()),
				"pool", "a"),
		},
		{
			name: "a model no node has",
			pod:  defaulted(vm("p").Annotation(vmspec.AnnotationCPUModel, "EPYC").Obj()),
		},
		{
			name: "not a VM pod",
			pod:  plainPod("p", "1Gi"),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newTestFramework(t, "", nodes, nil)
			res, _, _ := f.RunPreFilterPlugins(f.ctx, framework.NewCycleState(), tc.pod)
			var got []string
			if !res.AllNodes() {
				got = sets.List(res.NodeNames)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("PreFilter's nodes (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPreFilterSkipsOtherPods: for a pod that is not a VM pod PreFilter
// returns Skip, not a node list, so that the framework calls no Filter of
// the plugin for it and looks up no names.
func TestPreFilterSkipsOtherPods(t *testing.T) {
	nodes := []*v1.Node{
		makeNode("kvm").KVM().Obj(),
		makeNode("no-vmpod").Label(vmspec.LabelRuntime, "false").Obj(),
		makeNode("no-vmpod-2").Label(vmspec.LabelRuntime, "false").Obj(),
	}
	f := newTestFramework(t, "", nodes, nil)
	state := framework.NewCycleState()
	res, st, _ := f.RunPreFilterPlugins(f.ctx, state, plainPod("p", "1Gi"))
	if !st.IsSuccess() || !res.AllNodes() {
		t.Errorf("PreFilter: got %v and %v, want success and every node", res, st)
	}
	if !state.GetSkipFilterPlugins().Has(vmplacement.Name) {
		t.Error("Filter not skipped for a pod that is not a VM pod")
	}
}
