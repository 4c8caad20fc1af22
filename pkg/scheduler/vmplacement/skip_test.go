package vmplacement_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	"github.com/vmpod/vmpod/pkg/scheduler/vmplacement"
	"github.com/vmpod/vmpod/pkg/vmspec"
	"github.com/vmpod/vmpod/pkg/vmspec/vmspectest"
)

// TestFilterSkipped checks when PreFilter skips Filter for a VM pod: only
// once Reserve has been seen, only for a pod whose count covers its VM's
// footprint, only while no pod in the cluster takes memory beyond its
// count; and that Reserve refuses a node Filter would have refused, after
// which Filter runs for every VM pod.
func TestFilterSkipped(t *testing.T) {
	roomy := makeNode("roomy").KVM().Obj()
	small := makeNode("small").KVM().Memory("1Gi").Obj()
	client := fake.NewClientset(roomy, small)
	factory := informers.NewSharedInformerFactory(client, 0)
	f := newTestFrameworkWith(t, "", []*v1.Node{roomy, small}, nil, frameworkruntime.WithInformerFactory(factory))
	ctx, cancel := context.WithCancel(f.ctx)
	t.Cleanup(func() { cancel(); factory.Shutdown() })
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())

	// covered asks for 1Gi and its RuntimeClass overhead adds 1Gi, more
	// than any VM overhead of a 1Gi guest; bare has no overhead.
	covered := withOverhead(defaulted(vmspectest.MakePod("covered").UID("uid-covered").Memory("1Gi").Obj()), "1Gi")
	bare := defaulted(vmspectest.MakePod("bare").UID("uid-bare").Memory("1Gi").Obj())

	preFilter := func(t *testing.T, pod *v1.Pod) fwk.CycleState {
		t.Helper()
		state := framework.NewCycleState()
		if _, st, _ := f.RunPreFilterPlugins(f.ctx, state, pod); !st.IsSuccess() {
			t.Fatalf("PreFilter: %v", st)
		}
		return state
	}
	skipped := func(t *testing.T, pod *v1.Pod) bool {
		t.Helper()
		return preFilter(t, pod).GetSkipFilterPlugins().Has(vmplacement.Name)
	}
	// eventually waits for the informers' events to reach the plugin.
	eventually := func(t *testing.T, pod *v1.Pod, want bool) {
		t.Helper()
		err := wait.PollUntilContextTimeout(f.ctx, 10*time.Millisecond, eventWait, true, func(context.Context) (bool, error) {
			return skipped(t, pod) == want, nil
		})
		if err != nil {
			t.Fatalf("Filter skipped for %s: want %v", pod.Name, want)
		}
	}

	// The informers have synced; no Reserve call yet.
	if err := wait.PollUntilContextTimeout(f.ctx, 10*time.Millisecond, eventWait, true, func(context.Context) (bool, error) {
		res, _, _ := f.RunPreFilterPlugins(f.ctx, framework.NewCycleState(), covered)
		return res.AllNodes(), nil
	}); err != nil {
		t.Fatal(err)
	}
	if skipped(t, covered) {
		t.Fatal("Filter skipped before any Reserve call")
	}
	if st := f.RunReservePluginsReserve(f.ctx, framework.NewCycleState(), plainPod("plain", "1Gi"), "roomy"); !st.IsSuccess() {
		t.Fatalf("Reserve of a plain pod: %v", st)
	}
	eventually(t, covered, true)
	if skipped(t, bare) {
		t.Error("Filter skipped for a VM pod whose count does not cover its footprint")
	}
	// Score then reads no node state; the scores are those it gives when
	// Filter runs (compared at the end).
	skippedScores := f.scores(t, covered)

	// A pod that may take memory beyond its count, anywhere in the
	// cluster, and then gone.
	if _, err := client.CoreV1().Pods(bare.Namespace).Create(f.ctx, bare, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, covered, false)
	if err := client.CoreV1().Pods(bare.Namespace).Delete(f.ctx, bare.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, covered, true)

	// Reserve on roomy accepts; on small, which Filter would refuse (its
	// 1Gi cannot hold the pod's 2Gi), it fails, and from then on Filter
	// runs.
	state := preFilter(t, covered)
	if st := f.RunReservePluginsReserve(f.ctx, state, covered, "roomy"); !st.IsSuccess() {
		t.Fatalf("Reserve on roomy: %v", st)
	}
	if got := resultOf(f.RunFilterPlugins(f.ctx, framework.NewCycleState(), covered, f.nodeInfo(t, "small"))); got.Code == "Success" {
		t.Fatalf("test setup: Filter accepts small: %v", got)
	}
	st := f.RunReservePluginsReserve(f.ctx, state, covered, "small")
	if st.Code() != fwk.Error {
		t.Fatalf("Reserve on small: got %v, want an error", st)
	}
	if skipped(t, covered) {
		t.Error("Filter skipped after Reserve refused a node")
	}
	if diff := cmp.Diff(f.scores(t, covered), skippedScores); diff != "" {
		t.Errorf("scores with Filter skipped (-with Filter +skipped):\n%s", diff)
	}
}

// TestFilterPassesNamedNodes: for a VM pod that some class of node cannot
// run, PreFilter names the nodes of the classes that can, and once Filter
// would add nothing to NodeResourcesFit (as in TestFilterSkipped), Filter
// passes the named nodes without looking at them; Reserve refuses a node
// Filter would have refused, and from then on Filter runs.
func TestFilterPassesNamedNodes(t *testing.T) {
	nodes := []*v1.Node{
		makeNode("roomy").KVM().Obj(),
		makeNode("small").KVM().Memory("1Gi").Obj(),
		makeNode("tcg-a").Obj(),
		makeNode("tcg-b").Obj(),
	}
	client := fake.NewClientset(nodes[0], nodes[1], nodes[2], nodes[3])
	factory := informers.NewSharedInformerFactory(client, 0)
	f := newTestFrameworkWith(t, "", nodes, nil, frameworkruntime.WithInformerFactory(factory))
	ctx, cancel := context.WithCancel(f.ctx)
	t.Cleanup(func() { cancel(); factory.Shutdown() })
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())

	// The VM needs KVM, which the TCG nodes lack; its count (1Gi and 1Gi
	// of RuntimeClass overhead) covers its footprint, and small's 1Gi
	// cannot hold it.
	pod := withOverhead(defaulted(vmspectest.MakePod("p").UID("uid-p").Memory("1Gi").
		Annotation(vmspec.AnnotationAccel, "kvm").Obj()), "1Gi")
	// filterSmall runs PreFilter, checks the nodes it names, and returns
	// Filter's result on small in the same cycle.
	filterSmall := func(t *testing.T) (fwk.CycleState, result) {
		t.Helper()
		state := framework.NewCycleState()
		res, st, _ := f.RunPreFilterPlugins(f.ctx, state, pod)
		if !st.IsSuccess() {
			t.Fatalf("PreFilter: %v", st)
		}
		if res.AllNodes() || !res.NodeNames.Equal(sets.New("roomy", "small")) {
			t.Fatalf("PreFilter named %v, want roomy and small", res)
		}
		return state, resultOf(f.RunFilterPlugins(f.ctx, state, pod, f.nodeInfo(t, "small")))
	}
	refused := result{Code: fwk.Unschedulable.String(), Reasons: []string{vmplacement.ErrReasonMemory}}

	if err := wait.PollUntilContextTimeout(f.ctx, 10*time.Millisecond, eventWait, true, func(context.Context) (bool, error) {
		res, _, _ := f.RunPreFilterPlugins(f.ctx, framework.NewCycleState(), pod)
		return !res.AllNodes(), nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, got := filterSmall(t); !cmp.Equal(refused, got) {
		t.Fatalf("Filter on small before any Reserve call: got %v, want %v", got, refused)
	}
	if st := f.RunReservePluginsReserve(f.ctx, framework.NewCycleState(), plainPod("plain", "1Gi"), "roomy"); !st.IsSuccess() {
		t.Fatalf("Reserve of a plain pod: %v", st)
	}
	var state fwk.CycleState
	if err := wait.PollUntilContextTimeout(f.ctx, 10*time.Millisecond, eventWait, true, func(context.Context) (bool, error) {
		var got result
		state, got = filterSmall(t)
		return cmp.Equal(success, got), nil
	}); err != nil {
		t.Fatal("Filter does not pass the named nodes once Reserve has been seen")
	}

	if st := f.RunReservePluginsReserve(f.ctx, state, pod, "small"); st.Code() != fwk.Error {
		t.Fatalf("Reserve on small: got %v, want an error", st)
	}
	if _, got := filterSmall(t); !cmp.Equal(refused, got) {
		t.Errorf("Filter on small after Reserve refused it: got %v, want %v", got, refused)
	}
}
