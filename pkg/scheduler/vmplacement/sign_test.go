package vmplacement_test

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/vmpod/vmpod/pkg/vmspec"
	"github.com/vmpod/vmpod/pkg/vmspec/vmspectest"
)

// TestSignPod: pods that ask for the same VM share a signature (and so may
// share a scheduling result); any difference the plugin reads splits them.
func TestSignPod(t *testing.T) {
	f := newTestFramework(t, "", nil, nil)
	signer := f.plugin(t).(fwk.SignPlugin)
	sign := func(p *v1.Pod) (string, fwk.Code) {
		frags, st := signer.SignPod(f.ctx, p)
		if !st.IsSuccess() {
			return "", st.Code()
		}
		b, err := json.Marshal(frags)
		if err != nil {
			t.Fatal(err)
		}
		return string(b), fwk.Success
	}
	vm := func(name string) *vmspectest.PodWrapper { return vmspectest.MakePod(name).Memory("1Gi") }
	base, _ := sign(defaulted(vm("a").Obj()))

	for _, tc := range []struct {
		name     string
		pod      *v1.Pod
		wantSame bool
		wantCode fwk.Code
	}{
		{name: "same VM, other name", pod: defaulted(vm("b").Obj()), wantSame: true},
		{name: "unrelated annotation", pod: defaulted(vm("b").Annotation("team", "a").Obj()), wantSame: true},
		{name: "other accelerator", pod: defaulted(vm("b").Annotation(vmspec.AnnotationAccel, "kvm").Obj())},
		{name: "other CPU model", pod: defaulted(vm("b").Annotation(vmspec.AnnotationCPUModel, "EPYC").Obj())},
		{name: "other image", pod: defaulted(vm("b").Image("localhost/other:v1").Obj())},
		{name: "more memory", pod: defaulted(vm("b").Memory("2Gi").Obj())},
		{name: "request below limit", pod: withRequest(vm("b").Obj(), "512Mi")},
		{name: "pod overhead", pod: withOverhead(defaulted(vm("b").Obj()), "64Mi")},
		{name: "not a VM pod", pod: plainPod("b", "1Gi")},
		{name: "invalid VM pod", pod: vm("b").Annotation(vmspec.AnnotationAccel, "fast").Obj(), wantCode: fwk.Unschedulable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, code := sign(tc.pod)
			if diff := cmp.Diff(tc.wantCode, code); diff != "" {
				t.Fatalf("SignPod status (-want +got):\n%s", diff)
			}
			if code == fwk.Success && (got == base) != tc.wantSame {
				t.Errorf("signature %s\nbase      %s\nsame = %v, want %v", got, base, got == base, tc.wantSame)
			}
		})
	}
}
