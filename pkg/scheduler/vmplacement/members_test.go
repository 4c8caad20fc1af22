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
	"k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	"github.com/vmpod/vmpod/pkg/vmspec"
	"github.com/vmpod/vmpod/pkg/vmspec/vmspectest"
)

// swapLister is the framework's snapshot, replaced between the steps of a
// test as the scheduler updates its own between cycles.
type swapLister struct{ fwk.SharedLister }

// eventWait bounds each wait for the informer's events to reach the
// plugin; it is no speed requirement.
const eventWait = 30 * time.Second

// TestPreFilterFollowsNodeEvents checks that with the node informer
// PreFilter names the nodes of the classes that can run the VM as the
// informer's events have them: a node whose labels change is named by its
// new labels, and nodes added and deleted are named or not; and that while
// the informer and the snapshot disagree on the number of nodes, PreFilter
// names nodes from the snapshot.
func TestPreFilterFollowsNodeEvents(t *testing.T) {
	// The VM needs KVM, so TCG-only nodes cannot run it and PreFilter
	// names the others; tcg-y and tcg-z stay TCG-only throughout, so that
	// those are never more than half of the nodes (worthNaming).
	pod := defaulted(vmspectest.MakePod("p").UID("uid-p").Memory("1Gi").Annotation(vmspec.AnnotationAccel, "kvm").Obj())
	kvmA := makeNode("kvm-a").KVM().Obj()
	tcgB := makeNode("tcg-b").Obj()
	tcgY := makeNode("tcg-y").Obj()
	tcgZ := makeNode("tcg-z").Obj()
	client := fake.NewClientset(kvmA, tcgB, tcgY, tcgZ)
	factory := informers.NewSharedInformerFactory(client, 0)
	lister := &swapLister{cache.NewSnapshot(nil, []*v1.Node{kvmA, tcgB, tcgY, tcgZ})}
	f := newTestFrameworkWith(t, "", nil, nil,
		frameworkruntime.WithInformerFactory(factory), frameworkruntime.WithSnapshotSharedLister(lister))
	ctx, cancel := context.WithCancel(f.ctx)
	t.Cleanup(func() { cancel(); factory.Shutdown() })
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())

	// namesFor waits until PreFilter names want (nil: every node) for the
	// pod.
	namesFor := func(t *testing.T, pod *v1.Pod, want []string) {
		t.Helper()
		var got []string
		err := wait.PollUntilContextTimeout(f.ctx, 10*time.Millisecond, eventWait, true, func(context.Context) (bool, error) {
			res, st, _ := f.RunPreFilterPlugins(f.ctx, framework.NewCycleState(), pod)
			if !st.IsSuccess() {
				t.Fatalf("PreFilter: %v", st)
			}
			got = nil
			if !res.AllNodes() {
				got = sets.List(res.NodeNames)
			}
			return cmp.Equal(want, got), nil
		})
		if err != nil {
			t.Fatalf("PreFilter's nodes for %s (-want +got):\n%s", pod.Name, cmp.Diff(want, got))
		}
	}
	names := func(t *testing.T, want []string) {
		t.Helper()
		namesFor(t, pod, want)
	}
	update := func(t *testing.T, n *v1.Node) {
		t.Helper()
		if _, err := client.CoreV1().Nodes().Update(f.ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	names(t, []string{"kvm-a"})

	// Only the informer has the new labels: the snapshot still says tcg-b
	// is TCG-only, so tcg-b can be named only from the event.
	tcgBKVM := makeNode("tcg-b").KVM().Obj()
	update(t, tcgBKVM)
	names(t, []string{"kvm-a", "tcg-b"})
	// So for a pod whose nodeSelector names labeller labels only, as the
	// shipped RuntimeClass's does: a class decides it.
	selecting := pod.DeepCopy()
	selecting.Name = "selecting"
	selecting.Spec.NodeSelector = map[string]string{vmspec.LabelRuntime: "true"}
	namesFor(t, selecting, []string{"kvm-a", "tcg-b"})

	// Back to TCG-only.
	update(t, makeNode("tcg-b").Obj())
	names(t, []string{"kvm-a"})

	// A node the informer has and the snapshot does not yet: the
	// snapshot's nodes are named.
	kvmC := makeNode("kvm-c").KVM().Obj()
	if _, err := client.CoreV1().Nodes().Create(f.ctx, kvmC, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	lister.SharedLister = cache.NewSnapshot(nil, []*v1.Node{kvmA, tcgB, tcgY, tcgZ})
	names(t, []string{"kvm-a"})
	lister.SharedLister = cache.NewSnapshot(nil, []*v1.Node{kvmA, tcgB, tcgY, tcgZ, kvmC})
	names(t, []string{"kvm-a", "kvm-c"})

	// kvm-a deleted. With kvm-c the only node left that can run the VM,
	// then tcg-b made a KVM node again.
	if err := client.CoreV1().Nodes().Delete(f.ctx, "kvm-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	lister.SharedLister = cache.NewSnapshot(nil, []*v1.Node{tcgB, tcgY, tcgZ, kvmC})
	names(t, []string{"kvm-c"})
	update(t, tcgBKVM)
	lister.SharedLister = cache.NewSnapshot(nil, []*v1.Node{tcgBKVM, tcgY, tcgZ, kvmC})
	names(t, []string{"kvm-c", "tcg-b"})

	// tcg-y made a KVM node too: three of the four nodes can run the VM,
	// more than half, so PreFilter names none (worthNaming); then back.
	tcgYKVM := makeNode("tcg-y").KVM().Obj()
	update(t, tcgYKVM)
	lister.SharedLister = cache.NewSnapshot(nil, []*v1.Node{tcgBKVM, tcgYKVM, tcgZ, kvmC})
	names(t, nil)
	update(t, tcgY)
	lister.SharedLister = cache.NewSnapshot(nil, []*v1.Node{tcgBKVM, tcgY, tcgZ, kvmC})
	names(t, []string{"kvm-c", "tcg-b"})

	// When no node of those has the memory for the VM, PreFilter names
	// none, so that Filter's reasons reach the event.
	full := makeNode("kvm-c").KVM().Memory("512Mi").Obj()
	update(t, full)
	update(t, makeNode("tcg-b").Obj())
	lister.SharedLister = cache.NewSnapshot(nil, []*v1.Node{tcgB, tcgY, tcgZ, full})
	names(t, nil)
}
