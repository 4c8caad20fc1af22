package vmplacement

import (
	"context"
	"fmt"
	"slices"

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
	// nodes caches what the plugin reads from each node (node.go).
	nodes nodeIndex
	// classes are the kinds of node by labeller labels (classes.go).
	classes capsClasses
	// scan is PreFilter's pass over the nodes (candidates).
	scan scan
}

var (
	_ fwk.PreFilterPlugin   = &VMPlacement{}
	_ fwk.FilterPlugin      = &VMPlacement{}
	_ fwk.PreScorePlugin    = &VMPlacement{}
	_ fwk.ScorePlugin       = &VMPlacement{}
	_ fwk.ScoreExtensions   = &VMPlacement{}
	_ fwk.EnqueueExtensions = &VMPlacement{}
	_ fwk.SignPlugin        = &VMPlacement{}
)

// New builds the plugin from its pluginConfig args (nil for all defaults).
// It needs nothing from the framework handle: Filter and Score read the
// NodeInfo they are given.
func New(_ context.Context, obj runtime.Object, _ fwk.Handle) (fwk.Plugin, error) {
	args, err := decodeArgs(obj)
	if err != nil {
		return nil, fmt.Errorf("%s args: %w", Name, err)
	}
	if err := ValidateAndDefault(&args); err != nil {
		return nil, fmt.Errorf("%s args: %w", Name, err)
	}
	return &VMPlacement{args: args}, nil
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
