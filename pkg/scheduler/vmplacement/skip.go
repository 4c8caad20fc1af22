package vmplacement

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/vmpod/vmpod/pkg/vmspec"
)

// Filter adds nothing to NodeResourcesFit for a VM pod when
//
//   - every class of node the cluster has can run the VM (PreFilter names
//     no nodes), as the node informer's events have it (members.go);
//   - the pod's own count (its requests and the RuntimeClass's podFixed)
//     covers the VM's footprint under either accelerator, so its
//     footprint is its count;
//   - no pod in the cluster takes memory beyond its count (extra, memory.go),
//     as the pod informer's events have it (extras, below),
//
// for then Filter's memory check is NodeResourcesFit's: allocatable minus
// the requests of the node's pods must hold the pod's count. PreFilter
// then returns Skip, and Filter is not called for the pod on any node, nor
// does Score look up the nodes' states: in a cluster whose RuntimeClass
// overhead covers its VMs (the shipped one does up to 8 GiB), for most VM
// pods.
//
// When some class cannot run the VM and PreFilter names the nodes of the
// classes that can, from the node informer's classes (candidatesByClass),
// the other two conditions make Filter add nothing on the named nodes.
// The framework ignores the node names of a PreFilter that returns Skip,
// so Filter is called on them, and passes each at once without looking
// at the node; nor does Score look up the nodes' states. A node the
// informer has in another class than the snapshot does is what Reserve
// catches, as below.
//
// The informers' events and the scheduler's snapshot are taken in
// separate goroutines, so the first and third conditions may be a moment
// behind the snapshot. Reserve therefore checks the node the scheduler
// chose, as Filter would have, and PreFilter skips Filter only once the
// plugin has seen a Reserve call (a profile could enable it at Filter and
// not at Reserve). Should Reserve refuse the node (a race with an event;
// or NodeResourcesFit disabled in the profile, so that no one checked
// memory), the pod is retried after a backoff and the plugin runs Filter
// for every VM pod from then on.

// extras are the pods, by UID, that may take memory beyond their count
// on some node: valid VM pods whose footprint under KVM or TCG exceeds
// their count. The scheduler's pod informer sees every pod before any
// scheduler places it and before it is bound.
type extras struct {
	mu   sync.Mutex
	pods map[types.UID]struct{} // guarded by mu
	n    atomic.Int64           // len(pods)
	// synced reports whether the handler has seen the informer's first
	// list.
	synced func() bool
}

func newExtras(pl *VMPlacement, factory informers.SharedInformerFactory) (*extras, error) {
	x := &extras{pods: map[types.UID]struct{}{}}
	reg, err := factory.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { x.set(obj, pl.mayTakeExtra) },
		UpdateFunc: func(_, obj any) { x.set(obj, pl.mayTakeExtra) },
		DeleteFunc: x.remove,
	})
	if err != nil {
		return nil, err
	}
	x.synced = reg.HasSynced
	return x, nil
}

// none reports whether no pod the informer has may take an extra.
func (x *extras) none() bool {
	return x != nil && x.synced() && x.n.Load() == 0
}

func (x *extras) set(obj any, mayTakeExtra func(*v1.Pod) bool) {
	pod, ok := obj.(*v1.Pod)
	if !ok {
		return
	}
	extra := mayTakeExtra(pod)
	x.mu.Lock()
	defer x.mu.Unlock()
	if extra {
		x.pods[pod.UID] = struct{}{}
	} else {
		delete(x.pods, pod.UID)
	}
	x.n.Store(int64(len(x.pods)))
}

func (x *extras) remove(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	pod, ok := obj.(*v1.Pod)
	if !ok {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	delete(x.pods, pod.UID)
	x.n.Store(int64(len(x.pods)))
}

// mayTakeExtra reports whether the pod may take memory beyond its count
// on some node (podExtra under either accelerator).
func (pl *VMPlacement) mayTakeExtra(pod *v1.Pod) bool {
	if !pl.isVMPod(pod) {
		return false
	}
	spec, err := vmspec.FromPod(pod)
	if err != nil {
		return false
	}
	counted := countedMemory(&framework.PodInfo{Pod: pod})
	guest, vcpus := vmSize(pod, spec)
	shares := len(spec.Shares)
	return vmFootprint(guest, vcpus, shares, true) > counted || vmFootprint(guest, vcpus, shares, false) > counted
}

// filterAddsNothing reports whether Filter would add nothing to
// NodeResourcesFit for a VM pod with these needs on nodes of classes that
// can run it (above).
func (pl *VMPlacement) filterAddsNothing(cs fwk.CycleState, n *needs, snapshotNodes int) bool {
	return pl.reserveSeen.Load() && !pl.filterAlways.Load() &&
		!cs.IsPodGroupSchedulingCycle() && // the snapshot then holds the pods placed so far, this one at Reserve too
		n.footprintKVM == n.CountedBytes && n.footprintTCG == n.CountedBytes &&
		pl.members.ready(snapshotNodes) && pl.extras.none()
}

// Reserve checks the chosen node as Filter would have, for a pod whose
// Filter PreFilter skipped.
func (pl *VMPlacement) Reserve(_ context.Context, cs fwk.CycleState, _ *v1.Pod, nodeName string) *fwk.Status {
	if !pl.reserveSeen.Load() {
		pl.reserveSeen.Store(true)
	}
	n, err := getPreFilterState(cs)
	if err != nil || !n.filterSkipped {
		return nil
	}
	ni, err := pl.snapshot.NodeInfos().Get(nodeName)
	if err != nil {
		return fwk.AsStatus(fmt.Errorf("%s Reserve: %w", Name, err))
	}
	s := pl.nodeState(ni)
	kvm, reason := n.fitsClass(s.class)
	if reason == "" && !n.fitsMemory(ni, s, kvm) {
		reason = ErrReasonMemory
	}
	if reason == "" {
		return nil
	}
	pl.filterAlways.Store(true)
	// An error, not a rejection: the pod is retried after a backoff, and
	// then goes through Filter.
	return fwk.AsStatus(fmt.Errorf("%s skipped Filter for the pod, and node %s: %s; Filter now runs for every VM pod", Name, nodeName, reason))
}

// Unreserve has nothing to undo: Reserve changes no state of the pod's.
func (pl *VMPlacement) Unreserve(context.Context, fwk.CycleState, *v1.Pod, string) {}
