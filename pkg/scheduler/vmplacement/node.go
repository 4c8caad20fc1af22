package vmplacement

import (
	"strconv"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/vmpod/vmpod/pkg/vmspec"
)

// caps is what a node can run, as the labeller's labels say (vmspec.Label*,
// docs/labels.md).
type caps struct {
	// labels are the node's labels the labeller owns (vmspec.LabelPrefixes),
	// read for the named CPU models, CPU features and machine types
	// (LabelCPUModelPrefix and so on).
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

// nodeState is what the plugin reads from a NodeInfo: the node's caps
// class (classes.go) and the memory its pods take beyond NodeResourcesFit's
// count (memory.go). It is immutable once built.
type nodeState struct {
	// node is the Node object the class was read from: an updated node is
	// a new object (the informer never changes one in place).
	node       *v1.Node
	generation int64
	class      *capsClass
	extraBytes int64
}

// nodeState returns the NodeInfo's state, from the cache while the NodeInfo
// is unchanged. The NodeInfo's node must not be nil.
//
// A generation identifies a NodeInfo's contents: every change (a pod added
// or removed, the node updated) takes a new number from one process-wide
// counter, including on the clones the framework makes for nominated pods
// and preemption. Working a state out reads every VM pod on the node with
// vmspec.FromPod (microseconds each), and the node's labels when the Node
// object changed; in steady state only the node the last pod was bound to
// changes, so Filter and Score mostly pay one lookup per node (index.go).
func (pl *VMPlacement) nodeState(ni fwk.NodeInfo) *nodeState {
	node := ni.Node()
	gen := ni.GetGeneration()
	e := pl.infos.get(ni)
	if e == nil {
		e = pl.nodes.entry(node.Name)
	}
	old := e.state.Load()
	if old != nil && old.generation == gen && old.node == node {
		return old
	}
	s := &nodeState{node: node, generation: gen}
	switch {
	case old != nil && old.node == node:
		s.class = old.class
	case pl.members != nil:
		if s.class = pl.members.classOf(node); s.class == nil {
			s.class = pl.classes.of(node.Labels)
		}
	default:
		s.class = pl.classes.of(node.Labels)
	}
	for _, pi := range ni.GetPods() {
		s.extraBytes = addSat(s.extraBytes, pl.podExtra(pi, &s.class.caps))
	}
	// With members, the informer's events count the classes' nodes.
	if e.state.CompareAndSwap(old, s) && pl.members == nil && (old == nil || old.class != s.class) {
		s.class.nodes.Add(1)
		if old != nil {
			old.class.nodes.Add(-1)
		}
	}
	return s
}
