package vmplacement

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	fwk "k8s.io/kube-scheduler/framework"
)

// Name is the plugin's name in the registry and in a
// KubeSchedulerConfiguration.
const Name = "VMPlacement"

// VMPlacement filters and scores nodes for VM pods.
type VMPlacement struct {
	args VMPlacementArgs
	// nodes caches what the plugin reads from each node (node.go), by
	// name and by the snapshot's NodeInfo (index.go).
	nodes nodeIndex
	infos infoIndex
	// classes are the kinds of node by labeller labels (classes.go).
	classes capsClasses
	// members follows the node informer (members.go); nil when the
	// framework handle has no informer factory.
	members *members
	// extras follows the pod informer (skip.go); nil when members is.
	extras *extras
	// reserveSeen is set by the first Reserve call, filterAlways by a
	// Reserve that refused a node Filter was skipped for (skip.go).
	reserveSeen, filterAlways atomic.Bool
	// snapshot is the framework's snapshot of the nodes, for PreFilter's
	// look at the nodes it names (candidatesByClass) and Reserve's.
	snapshot fwk.SharedLister
	// scan is PreFilter's pass over the nodes (candidates).
	scan scan
}

var (
	_ fwk.PreFilterPlugin   = &VMPlacement{}
	_ fwk.FilterPlugin      = &VMPlacement{}
	_ fwk.PreScorePlugin    = &VMPlacement{}
	_ fwk.ScorePlugin       = &VMPlacement{}
	_ fwk.ReservePlugin     = &VMPlacement{}
	_ fwk.ScoreExtensions   = &VMPlacement{}
	_ fwk.EnqueueExtensions = &VMPlacement{}
	_ fwk.SignPlugin        = &VMPlacement{}
)

// New builds the plugin from its pluginConfig args (nil for all defaults).
// From the framework handle it takes the node informer, whose events keep
// the nodes' classes (members.go), the pod informer (skip.go), and the
// snapshot; Filter and Score read the NodeInfo they are given.
func New(_ context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	args, err := decodeArgs(obj)
	if err != nil {
		return nil, fmt.Errorf("%s args: %w", Name, err)
	}
	if err := ValidateAndDefault(&args); err != nil {
		return nil, fmt.Errorf("%s args: %w", Name, err)
	}
	pl := &VMPlacement{args: args}
	if h != nil && h.SharedInformerFactory() != nil {
		if pl.members, err = newMembers(&pl.classes, h.SharedInformerFactory()); err != nil {
			return nil, fmt.Errorf("%s: following nodes: %w", Name, err)
		}
		if pl.extras, err = newExtras(pl, h.SharedInformerFactory()); err != nil {
			return nil, fmt.Errorf("%s: following pods: %w", Name, err)
		}
		pl.snapshot = h.SnapshotSharedLister()
	}
	return pl, nil
}

// Name returns the plugin's name.
func (pl *VMPlacement) Name() string { return Name }

// isVMPod reports whether the pod's RuntimeClass is one of the args'.
func (pl *VMPlacement) isVMPod(pod *v1.Pod) bool {
	rc := pod.Spec.RuntimeClassName
	return rc != nil && slices.Contains(pl.args.RuntimeClassNames, *rc)
}

// signerKey names the plugin's signature fragment (opportunistic batching,
// KEP-5598): pods with equal fragments get equal filter and score results.
const signerKey = "vmpod.io/VMPlacement.needs()"

// SignPod signs a VM pod with everything Filter and Score read from it (its
// needs) and any other pod with nil, since the plugin ignores it. An
// invalid VM pod is not signed: it fails PreFilter anyway.
func (pl *VMPlacement) SignPod(_ context.Context, pod *v1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	n, st := pl.needsFor(pod)
	if !st.IsSuccess() {
		return nil, fwk.NewStatus(fwk.Unschedulable, "invalid VM pod")
	}
	return []fwk.SignFragment{{Key: signerKey, Value: n}}, nil
}
