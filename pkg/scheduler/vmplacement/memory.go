package vmplacement

import (
	"sync"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/vmpod/vmpod/pkg/vmspec"
)

// Memory, as this plugin counts it (docs/scheduler.md):
//
//	counted(p)   = p's memory requests + p.spec.overhead   (what NodeResourcesFit counts)
//	footprint(p) = guest RAM (limits.memory) + vmspec overhead(guest RAM, vCPUs, accelerator)
//	extra(p)     = max(0, footprint(p) - counted(p))        for a VM pod, 0 for any other pod
//
// and a VM pod fits a node when
//
//	allocatable - Σ counted(pods on node) - Σ extra(pods on node) >= max(counted(pod), footprint(pod)).
//
// NodeResourcesFit still checks requests alone; this is the stricter check
// on top, never a second count of the same bytes.

// usedMemory is the memory the node's pods take: NodeResourcesFit's count
// (NodeInfo.GetRequested, which includes pod overhead) plus each VM pod's
// extra.
func (pl *VMPlacement) usedMemory(ni fwk.NodeInfo) int64 {
	return ni.GetRequested().GetMemory() + pl.extraMemory(ni)
}

// extraCache remembers the extra memory of each node's pods by node name,
// valid while the NodeInfo's generation is unchanged. Working it out reads
// every VM pod on the node with vmspec.FromPod (microseconds each), which
// Filter would otherwise repeat for every node in every scheduling cycle.
//
// A generation identifies a NodeInfo's contents: every change (a pod added
// or removed, the node updated) takes a new number from one process-wide
// counter, including on the clones the framework makes for nominated pods
// and preemption. A deleted node's entry stays: one small entry per node
// name the scheduler has seen.
type extraCache struct {
	m sync.Map // node name -> extraEntry
}

type extraEntry struct {
	generation int64
	bytes      int64
}

func (pl *VMPlacement) extraMemory(ni fwk.NodeInfo) int64 {
	node := ni.Node()
	gen := ni.GetGeneration()
	if v, ok := pl.extra.m.Load(node.Name); ok {
		if e := v.(extraEntry); e.generation == gen {
			return e.bytes
		}
	}
	var sum int64
	for _, pi := range ni.GetPods() {
		sum += pl.podExtra(pi, node)
	}
	pl.extra.m.Store(node.Name, extraEntry{generation: gen, bytes: sum})
	return sum
}

// podExtra is the memory a pod on the node takes beyond NodeResourcesFit's
// count of it: 0 unless it is a valid VM pod (the runtime refuses an
// invalid one, so it never starts a VM).
func (pl *VMPlacement) podExtra(pi fwk.PodInfo, node *v1.Node) int64 {
	pod := pi.GetPod()
	if !pl.isVMPod(pod) {
		return 0
	}
	spec, err := vmspec.FromPod(pod)
	if err != nil {
		return 0
	}
	fp := vmFootprint(int64(spec.MemoryBytes), spec.VCPUs, runsUnderKVM(spec.Accel, node))
	return max(0, fp-countedMemory(pi))
}
