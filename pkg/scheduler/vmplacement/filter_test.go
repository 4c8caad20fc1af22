package vmplacement_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/vmpod/vmpod/pkg/scheduler/vmplacement"
	"github.com/vmpod/vmpod/pkg/vmspec"
	"github.com/vmpod/vmpod/pkg/vmspec/vmspectest"
)

func unresolvable(reason string) result {
	return result{Code: fwk.UnschedulableAndUnresolvable.String(), Reasons: []string{reason}}
}

var noMemory = result{Code: fwk.Unschedulable.String(), Reasons: []string{vmplacement.ErrReasonMemory}}

func TestFilter(t *testing.T) {
	// A 1 GiB, 1 vCPU VM, and what it takes on a node under each
	// accelerator: the tests hold whatever the overhead model's constants.
	vm := func(name string) *vmspectest.PodWrapper {
		return vmspectest.MakePod(name).UID("uid-" + name).Memory("1Gi")
	}
	tcgFP, kvmFP := footprint(gi, 1, false), footprint(gi, 1, true)
	invalid := vm("p").Annotation(vmspec.AnnotationAccel, "fast").Obj()
	_, invalidErr := vmspec.FromPod(invalid)

	tests := []struct {
		name     string
		node     *v1.Node
		existing []*v1.Pod // bound to the node
		pod      *v1.Pod
		want     result
	}{
		// Pods the plugin leaves alone.
		{
			name: "pod without RuntimeClass on a node without vmpod",
			node: makeNode("n").Label(vmspec.LabelRuntime, "false").Obj(),
			pod:  plainPod("p", "1Gi"),
			want: success,
		},
		{
			name: "VM-like pod of another RuntimeClass",
			node: makeNode("n").Label(vmspec.LabelRuntime, "false").Obj(),
			pod:  vm("p").RuntimeClass("kata").Obj(),
			want: success,
		},

		// PreFilter.
		{
			name: "invalid VM pod",
			node: makeNode("n").Obj(),
			pod:  invalid,
			want: unresolvable(vmplacement.ErrReasonInvalidVM + invalidErr.Error()),
		},

		// One case per Filter reason.
		{
			name: "node does not run vmpod",
			node: makeNode("n").Label(vmspec.LabelRuntime, "false").Obj(),
			pod:  defaulted(vm("p").Obj()),
			want: unresolvable(vmplacement.ErrReasonNoRuntime),
		},
		{
			name: "node without any vmpod label",
			node: (&nodeWrapper{v1.Node{}}).Memory("16Gi").Obj(),
			pod:  defaulted(vm("p").Obj()),
			want: unresolvable(vmplacement.ErrReasonNoRuntime),
		},
		{
			name: "accel kvm on a TCG-only node",
			node: makeNode("n").Obj(),
			pod:  defaulted(vm("p").Annotation(vmspec.AnnotationAccel, "kvm").Obj()),
			want: unresolvable(vmplacement.ErrReasonNoKVM),
		},
		{
			name: "accel tcg on a KVM node without TCG",
			node: makeNode("n").KVM().Label(vmspec.LabelTCG, "false").Obj(),
			pod:  defaulted(vm("p").Annotation(vmspec.AnnotationAccel, "tcg").Obj()),
			want: unresolvable(vmplacement.ErrReasonNoTCG),
		},
		{
			name: "accel auto on a node with neither KVM nor TCG",
			node: makeNode("n").Label(vmspec.LabelTCG, "false").Obj(),
			pod:  defaulted(vm("p").Obj()),
			want: unresolvable(vmplacement.ErrReasonNoAccel),
		},
		{
			name: "host-passthrough on a TCG-only node",
			node: makeNode("n").Obj(),
			pod:  defaulted(vm("p").Annotation(vmspec.AnnotationCPUModel, "host-passthrough").Obj()),
			want: unresolvable(vmplacement.ErrReasonHostPassthrough),
		},
		{
			name: "cpu-model auto under KVM without host-passthrough",
			node: makeNode("n").KVM().Label(vmspec.LabelHostPassthrough, "false").Obj(),
			pod:  defaulted(vm("p").Obj()),
			want: unresolvable(vmplacement.ErrReasonHostPassthrough),
		},
		{
			name: "host-model on a node without a host-model CPU",
			node: makeNode("n").Unlabel(vmspec.LabelHostCPUModel).Obj(),
			pod:  defaulted(vm("p").Annotation(vmspec.AnnotationCPUModel, "host-model").Obj()),
			want: unresolvable(vmplacement.ErrReasonHostModel),
		},
		{
			name: "named CPU model missing",
			node: makeNode("n").KVM().Obj(),
			pod:  defaulted(vm("p").Annotation(vmspec.AnnotationCPUModel, "Icelake-Server").Obj()),
			want: unresolvable(vmplacement.ErrReasonCPUModelPrefix + "Icelake-Server"),
		},
		{
			name: "CPU features missing, all named",
			node: makeNode("n").KVM().Obj(),
			pod:  defaulted(vm("p").Annotation(vmspec.AnnotationCPUFeatures, "sha-ni,avx2,avx512f").Obj()),
			want: unresolvable(vmplacement.ErrReasonCPUFeaturesPrefix + "avx512f,sha-ni"),
		},
		{
			name: "UEFI missing",
			node: makeNode("n").Obj(),
			pod:  defaulted(vm("p").Annotation(vmspec.AnnotationFirmware, "uefi").Obj()),
			want: unresolvable(vmplacement.ErrReasonNoUEFI),
		},
		{
			name: "machine type missing",
			node: makeNode("n").Obj(),
			pod:  defaulted(vm("p").Annotation(vmspec.AnnotationMachine, "pc-i440fx-7.2").Obj()),
			want: unresolvable(vmplacement.ErrReasonMachinePrefix + "pc-i440fx-7.2"),
		},
		{
			name: "more vCPUs than the node allows",
			node: makeNode("n").Obj(),
			pod:  defaulted(vm("p").CPU("17").Obj()),
			want: unresolvable(vmplacement.ErrReasonTooManyVCPUs),
		},
		{
			name: "too little memory for guest RAM plus overhead",
			node: makeNode("n").MemoryBytes(tcgFP - mi).Obj(),
			pod:  defaulted(vm("p").Obj()),
			want: noMemory,
		},

		// Passes.
		{
			name: "auto on a TCG-only node",
			node: makeNode("n").Obj(),
			pod:  defaulted(vm("p").Obj()),
			want: success,
		},
		{
			name: "auto on a KVM node",
			node: makeNode("n").KVM().Obj(),
			pod:  defaulted(vm("p").Obj()),
			want: success,
		},
		{
			name: "everything a fully labelled KVM node offers",
			node: makeNode("n").KVM().Label(vmspec.LabelUEFI, "true").Obj(),
			pod: defaulted(vm("p").CPU("16").
				Annotation(vmspec.AnnotationAccel, "kvm").
				Annotation(vmspec.AnnotationCPUModel, "Skylake-Client").
				Annotation(vmspec.AnnotationCPUFeatures, "aes,avx2").
				Annotation(vmspec.AnnotationFirmware, "uefi").
				Annotation(vmspec.AnnotationMachine, "pc-q35-7.2").Obj()),
			want: success,
		},
		{
			name: "host-model on a node that has one",
			node: makeNode("n").Obj(),
			pod:  defaulted(vm("p").Annotation(vmspec.AnnotationCPUModel, "host-model").Obj()),
			want: success,
		},
		{
			name: "no vCPU limit without the max-vcpus label",
			node: makeNode("n").Unlabel(vmspec.LabelMaxVCPUs).Obj(),
			pod:  defaulted(vm("p").CPU("64").Obj()),
			want: success,
		},

		// Memory, counted together with NodeResourcesFit.
		{
			name: "memory exactly enough under TCG",
			node: makeNode("n").MemoryBytes(tcgFP).Obj(),
			pod:  defaulted(vm("p").Obj()),
			want: success,
		},
		{
			name: "auto on a KVM node counts the KVM overhead",
			node: makeNode("n").KVM().MemoryBytes(kvmFP).Obj(),
			pod:  defaulted(vm("p").Obj()),
			want: success,
		},
		{
			name: "accel tcg on a KVM node counts the TCG overhead",
			node: makeNode("n").KVM().MemoryBytes(kvmFP).Obj(),
			pod:  defaulted(vm("p").Annotation(vmspec.AnnotationAccel, "tcg").Obj()),
			want: noMemory,
		},
		{
			name: "request below the limit: the limit is the guest RAM",
			node: makeNode("n").MemoryBytes(tcgFP - mi).Obj(),
			pod:  withRequest(vm("p").Obj(), "256Mi"),
			want: noMemory,
		},
		{
			name: "pod overhead is part of the VM overhead, not added to it",
			node: makeNode("n").MemoryBytes(tcgFP).Obj(),
			pod:  withOverhead(defaulted(vm("p").Obj()), "16Mi"),
			want: success,
		},
		{
			name: "pod overhead above the model: NodeResourcesFit's count wins",
			node: makeNode("n").MemoryBytes(tcgFP).Obj(),
			pod:  withOverhead(defaulted(vm("p").Obj()), "2Gi"),
			want: noMemory,
		},
		{
			name:     "a VM already on the node takes its overhead",
			node:     makeNode("n").MemoryBytes(2*tcgFP - mi).Obj(),
			existing: []*v1.Pod{defaulted(vm("old").Obj())},
			pod:      defaulted(vm("p").Obj()),
			want:     noMemory,
		},
		{
			name:     "a VM already on the node and this one fit exactly",
			node:     makeNode("n").MemoryBytes(2 * tcgFP).Obj(),
			existing: []*v1.Pod{defaulted(vm("old").Obj())},
			pod:      defaulted(vm("p").Obj()),
			want:     success,
		},
		{
			name:     "a VM already on the node takes its limit, not its request",
			node:     makeNode("n").MemoryBytes(2*tcgFP - mi).Obj(),
			existing: []*v1.Pod{withRequest(vm("old").Obj(), "256Mi")},
			pod:      defaulted(vm("p").Obj()),
			want:     noMemory,
		},
		{
			name:     "a pod of another RuntimeClass takes its requests only",
			node:     makeNode("n").MemoryBytes(gi + tcgFP).Obj(),
			existing: []*v1.Pod{defaulted(vm("kata").RuntimeClass("kata").Obj())},
			pod:      defaulted(vm("p").Obj()),
			want:     success,
		},
		{
			name:     "a pod without RuntimeClass takes its requests only",
			node:     makeNode("n").MemoryBytes(gi + tcgFP).Obj(),
			existing: []*v1.Pod{plainPod("web", "1Gi")},
			pod:      defaulted(vm("p").Obj()),
			want:     success,
		},
		{
			name:     "an invalid VM pod on the node takes its requests only",
			node:     makeNode("n").MemoryBytes(gi + tcgFP).Obj(),
			existing: []*v1.Pod{defaulted(vm("bad").Annotation(vmspec.AnnotationAccel, "fast").Obj())},
			pod:      defaulted(vm("p").Obj()),
			want:     success,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.node.Name == "" {
				tc.node.Name = "n"
			}
			for _, p := range tc.existing {
				p.Spec.NodeName = tc.node.Name
			}
			f := newTestFramework(t, "", []*v1.Node{tc.node}, tc.existing)
			if diff := cmp.Diff(tc.want, f.filter(t, tc.pod, tc.node.Name)); diff != "" {
				t.Errorf("PreFilter+Filter (-want +got):\n%s", diff)
			}
			// Filter alone, as in a profile without the PreFilter
			// extension point, recomputes the same answer.
			st := f.plugin(t).(fwk.FilterPlugin).Filter(f.ctx, framework.NewCycleState(), tc.pod, f.nodeInfo(t, tc.node.Name))
			if diff := cmp.Diff(tc.want, resultOf(st)); diff != "" {
				t.Errorf("Filter without PreFilter (-want +got):\n%s", diff)
			}
		})
	}
}

// TestInvalidVMReasonIsOneLine: vmspec reports every problem, one per line;
// an event message is one line.
func TestInvalidVMReasonIsOneLine(t *testing.T) {
	pod := vmspectest.MakePod("p").Memory("").
		Annotation(vmspec.AnnotationAccel, "fast").
		Annotation(vmspec.AnnotationFirmware, "efi").Obj()
	f := newTestFramework(t, "", []*v1.Node{makeNode("n").Obj()}, nil)
	got := f.filter(t, pod, "n")
	if got.Code != fwk.UnschedulableAndUnresolvable.String() || len(got.Reasons) != 1 {
		t.Fatalf("got %+v, want one UnschedulableAndUnresolvable reason", got)
	}
	reason := got.Reasons[0]
	for _, part := range []string{vmplacement.ErrReasonInvalidVM, vmspec.AnnotationAccel, vmspec.AnnotationFirmware, "limits.memory"} {
		if !strings.Contains(reason, part) {
			t.Errorf("reason %q does not name %q", reason, part)
		}
	}
	if strings.Contains(reason, "\n") {
		t.Errorf("reason %q has a newline", reason)
	}
}

// TestFilterArgsRuntimeClassNames: only the configured RuntimeClasses are
// VM pods.
func TestFilterArgsRuntimeClassNames(t *testing.T) {
	node := makeNode("n").Label(vmspec.LabelRuntime, "false").Obj()
	f := newTestFramework(t, `{"runtimeClassNames": ["vmpod-fast", "vmpod"]}`, []*v1.Node{node}, nil)
	for rc, want := range map[string]result{
		"vmpod":      unresolvable(vmplacement.ErrReasonNoRuntime),
		"vmpod-fast": unresolvable(vmplacement.ErrReasonNoRuntime),
		"kata":       success,
		"":           success,
	} {
		pod := defaulted(vmspectest.MakePod("p").RuntimeClass(rc).Obj())
		if diff := cmp.Diff(want, f.filter(t, pod, "n")); diff != "" {
			t.Errorf("runtimeClassName %q (-want +got):\n%s", rc, diff)
		}
	}
}
