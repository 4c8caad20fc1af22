package vmplacement

import (
	"strconv"
	"sync"

	fwk "k8s.io/kube-scheduler/framework"

	"github.com/vmpod/vmpod/pkg/vmspec"
)

// caps is what a node can run, as the labeller's labels say (vmspec.Label*,
// docs/labels.md).
type caps struct {
	// labels are the node's own labels, read for the named CPU models,
	// CPU features and machine types (LabelCPUModelPrefix and so on).
	labels                                        map[string]string
	runtime, kvm, tcg, hostPassthrough, hostModel bool
	uefi                                          bool
	// maxVCPUs is 0 when the label is absent or malformed: the labeller
	// leaves it out when libvirt does not say, and vmspec caps vCPUs.
	maxVCPUs int
}

func capsOf(labels map[string]string) caps {
	is := func(key string) bool { return labels[key] == "true" }
	c := caps{
		labels:          labels,
		runtime:         is(vmspec.LabelRuntime),
		kvm:             is(vmspec.LabelKVM),
		tcg:             is(vmspec.LabelTCG),
		hostPassthrough: is(vmspec.LabelHostPassthrough),
		hostModel:       labels[vmspec.LabelHostCPUModel] != "",
		uefi:            is(vmspec.LabelUEFI),
	}
	if n, err := strconv.Atoi(labels[vmspec.LabelMaxVCPUs]); err == nil && n > 0 {
		c.maxVCPUs = n
	}
	return c
}

// has reports whether a name label (a CPU model, a CPU feature, a machine
// type; key is prefix+name) is "true".
func (c *caps) has(key string) bool { return c.labels[key] == "true" }

// runsUnderKVM reports whether a VM with that accelerator policy runs under
// KVM on the node; the node's runtime resolves auto the same way.
func (c *caps) runsUnderKVM(accel vmspec.Accel) bool {
	switch accel {
	case vmspec.AccelKVM:
		return true
	case vmspec.AccelTCG:
		return false
	default:
		return c.kvm
	}
}

// nodeState is what the plugin reads from a NodeInfo: the node's caps and
// the memory its pods take beyond NodeResourcesFit's count (memory.go).
// It is immutable once built.
type nodeState struct {
	generation int64
	caps       caps
	extraBytes int64
}

// nodeStates caches a nodeState per node name, valid while the NodeInfo's
// generation is unchanged. Working one out parses the node's labels and
// reads every VM pod on the node with vmspec.FromPod (microseconds each),
// which Filter and Score would otherwise repeat for every node in every
// scheduling cycle; in steady state only the node the last pod was bound
// to changes.
//
// A generation identifies a NodeInfo's contents: every change (a pod added
// or removed, the node updated) takes a new number from one process-wide
// counter, including on the clones the framework makes for nominated pods
// and preemption. A deleted node's entry stays: one small entry per node
// name the scheduler has seen.
type nodeStates struct {
	m sync.Map // node name -> *nodeState
}

// nodeState returns the NodeInfo's state, from the cache while the NodeInfo
// is unchanged. The NodeInfo's node must not be nil.
func (pl *VMPlacement) nodeState(ni fwk.NodeInfo) *nodeState {
	node := ni.Node()
	gen := ni.GetGeneration()
	if v, ok := pl.nodes.m.Load(node.Name); ok {
		if s := v.(*nodeState); s.generation == gen {
			return s
		}
	}
	s := &nodeState{generation: gen, caps: capsOf(node.Labels)}
	for _, pi := range ni.GetPods() {
		s.extraBytes = addSat(s.extraBytes, pl.podExtra(pi, &s.caps))
	}
	pl.nodes.m.Store(node.Name, s)
	return s
}
