package vmplacement

import (
	"context"
	"fmt"
	"reflect"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/vmpod/vmpod/pkg/vmspec"
)

// EventsToRegister returns the cluster events after which a VM pod this
// plugin rejected may fit:
//
//   - a node is added, or its labels (the labeller's view of what it can
//     run) or its allocatable memory change;
//   - a pod bound to a node is deleted, freeing memory, or is updated so
//     that it takes less (an in-place resize of a VM pod applied: its
//     status shows the smaller size);
//   - the rejected pod itself is updated (its vmpod.io/ annotations are
//     mutable, and may make an invalid VM valid or ask for less).
func (pl *VMPlacement) EventsToRegister(context.Context) ([]fwk.ClusterEventWithHint, error) {
	return []fwk.ClusterEventWithHint{
		{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Add | fwk.UpdateNodeLabel | fwk.UpdateNodeAllocatable}, QueueingHintFn: pl.isSchedulableAfterNodeChange},
		{Event: fwk.ClusterEvent{Resource: fwk.AssignedPod, ActionType: fwk.Delete}, QueueingHintFn: pl.isSchedulableAfterAssignedPodDelete},
		{Event: fwk.ClusterEvent{Resource: fwk.AssignedPod, ActionType: fwk.Update}, QueueingHintFn: pl.isSchedulableAfterAssignedPodUpdate},
		{Event: fwk.ClusterEvent{Resource: fwk.TargetPod, ActionType: fwk.Update}, QueueingHintFn: pl.isSchedulableAfterTargetPodUpdate},
	}, nil
}

// isSchedulableAfterNodeChange queues the pod when the new or changed node
// can run its VM by its labels and either was added, could not run it
// before, or has more allocatable memory than before.
func (pl *VMPlacement) isSchedulableAfterNodeChange(logger klog.Logger, pod *v1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	oldNode, _ := oldObj.(*v1.Node)
	newNode, ok := newObj.(*v1.Node)
	if !ok {
		return fwk.Queue, fmt.Errorf("want a *v1.Node, got %T", newObj)
	}
	n, st := pl.needsFor(pod)
	if !st.IsSuccess() || n == nil {
		// Invalid on every node, or not a pod this plugin rejects.
		return fwk.QueueSkip, nil
	}
	newCaps := capsOf(newNode.Labels)
	if _, reason := n.fits(&newCaps); reason != "" {
		logger.V(5).Info("Node cannot run the VM", "pod", klog.KObj(pod), "node", klog.KObj(newNode), "reason", reason)
		return fwk.QueueSkip, nil
	}
	if oldNode == nil {
		return fwk.Queue, nil
	}
	oldCaps := capsOf(oldNode.Labels)
	if _, reason := n.fits(&oldCaps); reason != "" {
		return fwk.Queue, nil
	}
	oldMem, newMem := oldNode.Status.Allocatable[v1.ResourceMemory], newNode.Status.Allocatable[v1.ResourceMemory]
	if newMem.Cmp(oldMem) > 0 {
		return fwk.Queue, nil
	}
	return fwk.QueueSkip, nil
}

// isSchedulableAfterAssignedPodDelete queues a VM pod when a deleted pod
// freed memory on its node.
func (pl *VMPlacement) isSchedulableAfterAssignedPodDelete(_ klog.Logger, pod *v1.Pod, oldObj, _ any) (fwk.QueueingHint, error) {
	deleted, ok := oldObj.(*v1.Pod)
	if !ok {
		return fwk.Queue, fmt.Errorf("want a *v1.Pod, got %T", oldObj)
	}
	if !pl.isVMPod(pod) {
		return fwk.QueueSkip, nil
	}
	if !pl.isVMPod(deleted) && countedMemory(&framework.PodInfo{Pod: deleted}) == 0 {
		return fwk.QueueSkip, nil
	}
	return fwk.Queue, nil
}

// isSchedulableAfterAssignedPodUpdate queues a VM pod when a pod on a
// node now takes less memory by this plugin's count, under either
// accelerator: NodeResourcesFit's own scale-down event looks at requests,
// and a VM pod's footprint follows its limits and status.
func (pl *VMPlacement) isSchedulableAfterAssignedPodUpdate(_ klog.Logger, pod *v1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	oldPod, ok1 := oldObj.(*v1.Pod)
	newPod, ok2 := newObj.(*v1.Pod)
	if !ok1 || !ok2 {
		return fwk.Queue, fmt.Errorf("want two *v1.Pod, got %T and %T", oldObj, newObj)
	}
	if !pl.isVMPod(pod) {
		return fwk.QueueSkip, nil
	}
	for _, kvm := range []bool{false, true} {
		if pl.takes(newPod, kvm) < pl.takes(oldPod, kvm) {
			return fwk.Queue, nil
		}
	}
	return fwk.QueueSkip, nil
}

// takes is the memory a pod on a node takes by this plugin's count: what
// NodeResourcesFit counts, or a VM pod's footprint when that is more.
func (pl *VMPlacement) takes(pod *v1.Pod, kvm bool) int64 {
	counted := countedMemory(&framework.PodInfo{Pod: pod})
	if !pl.isVMPod(pod) {
		return counted
	}
	spec, err := vmspec.FromPod(pod)
	if err != nil {
		return counted
	}
	guest, vcpus := vmSize(pod, spec)
	return max(counted, vmFootprint(guest, vcpus, len(spec.Shares), kvm))
}

// isSchedulableAfterTargetPodUpdate queues the pod when what the plugin
// reads from it changed.
func (pl *VMPlacement) isSchedulableAfterTargetPodUpdate(_ klog.Logger, pod *v1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	oldPod, ok1 := oldObj.(*v1.Pod)
	newPod, ok2 := newObj.(*v1.Pod)
	if !ok1 || !ok2 {
		return fwk.Queue, fmt.Errorf("want two *v1.Pod, got %T and %T", oldObj, newObj)
	}
	oldNeeds, oldSt := pl.needsFor(oldPod)
	newNeeds, newSt := pl.needsFor(newPod)
	if reflect.DeepEqual(oldNeeds, newNeeds) && oldSt.Message() == newSt.Message() {
		return fwk.QueueSkip, nil
	}
	return fwk.Queue, nil
}
