package vmplacement

import (
	"context"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/helper"
)

// imageSizeCap is the image size at which locality scores in full: pulling
// a gigabyte costs a VM start far more than anything else here, and a
// bigger image is not worth proportionally more.
const imageSizeCap int64 = 1 << 30

// PreScore skips Score for a pod whose scores would be equal on every
// node, so that the framework neither calls Score and NormalizeScore on
// each node nor weighs their results: for pods that are not VM pods, and
// for a VM pod that every node it is given scores alike (sameScore). An
// equal score on every node adds the same to each node's total, so it
// cannot change which node the scheduler chooses. PreScore also fills in
// PreFilter's state when PreFilter did not run.
func (pl *VMPlacement) PreScore(_ context.Context, cs fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) *fwk.Status {
	n, st := pl.stateOrNeeds(cs, pod)
	if !st.IsSuccess() {
		return fwk.AsStatus(st.AsError())
	}
	if n == nil {
		return fwk.NewStatus(fwk.Skip)
	}
	cs.Write(preFilterStateKey, n)
	if pl.sameScore(n, nodes) {
		return fwk.NewStatus(fwk.Skip)
	}
	return nil
}

// sameScore reports whether score gives each of the nodes the same score.
// It stops at the first node whose score differs from the first node's,
// which is the second node in a cluster where some nodes hold the VM's
// image and some do not; so it costs a pass of score's own work only
// when it saves the framework's pass over the nodes, as in a cluster of
// like nodes none of which holds the image, or all.
func (pl *VMPlacement) sameScore(n *needs, nodes []fwk.NodeInfo) bool {
	var first int64
	for i, ni := range nodes {
		if ni.Node() == nil {
			return false // Score reports it
		}
		s := pl.score(n, ni)
		if i == 0 {
			first = s
		} else if s != first {
			return false
		}
	}
	return true
}

// Score is the weighted sum of the image-locality and the strategy score
// of the node, each 0..MaxNodeScore; NormalizeScore scales the sums back
// to 0..MaxNodeScore.
func (pl *VMPlacement) Score(_ context.Context, cs fwk.CycleState, pod *v1.Pod, nodeInfo fwk.NodeInfo) (int64, *fwk.Status) {
	n, st := pl.stateOrNeeds(cs, pod)
	if !st.IsSuccess() {
		return 0, fwk.AsStatus(st.AsError())
	}
	if n == nil {
		return 0, nil
	}
	if nodeInfo.Node() == nil {
		return 0, fwk.NewStatus(fwk.Error, "node not found")
	}
	return pl.score(n, nodeInfo), nil
}

// score is Score for a VM pod with these needs on a node.
func (pl *VMPlacement) score(n *needs, nodeInfo fwk.NodeInfo) int64 {
	var score int64
	if w := *pl.args.ImageLocalityWeight; w > 0 {
		score += w * imageScore(n.Image, nodeInfo)
	}
	if w := *pl.args.StrategyWeight; w > 0 {
		score += w * pl.strategyScore(n, nodeInfo)
	}
	return score
}

// imageScore is MaxNodeScore when the node holds the image and it is at
// least imageSizeCap big, proportionally less for a smaller image, and 0
// when the node does not hold it.
func imageScore(image string, nodeInfo fwk.NodeInfo) int64 {
	st, ok := nodeInfo.GetImageStates()[image]
	if !ok {
		return 0
	}
	return fwk.MaxNodeScore * min(max(st.Size, 0), imageSizeCap) / imageSizeCap
}

// strategyScore is the share of the node's allocatable memory left free
// once the VM is placed (spread), or the share in use (pack), in
// 0..MaxNodeScore.
func (pl *VMPlacement) strategyScore(n *needs, nodeInfo fwk.NodeInfo) int64 {
	alloc := nodeInfo.GetAllocatable().GetMemory()
	if alloc <= 0 {
		return 0
	}
	var used, footprint int64
	if n.filterSkipped {
		// No pod takes memory beyond its count, and the VM's footprint
		// is its count (skip.go): the node's state has nothing to add.
		// Were the informers a moment behind, only this ranking would be.
		used, footprint = requestedSat(nodeInfo.GetRequested().GetMemory()), n.CountedBytes
	} else {
		s := pl.nodeState(nodeInfo)
		used, footprint = usedMemory(nodeInfo, s), n.footprint(s.class.caps.runsUnderKVM(n.Accel))
	}
	free := subSat(subSat(alloc, used), footprint)
	free = min(max(free, 0), alloc)
	share := scaleShare(fwk.MaxNodeScore, free, alloc)
	if pl.args.Strategy == StrategyPack {
		return fwk.MaxNodeScore - share
	}
	return share
}

// ScoreExtensions returns the plugin: it normalizes its scores.
func (pl *VMPlacement) ScoreExtensions() fwk.ScoreExtensions { return pl }

// NormalizeScore scales the scores so that the best node gets
// MaxNodeScore and the others keep their proportion to it. The plugin's
// weight in the profile then decides how much it counts against other
// score plugins, however full the cluster is.
func (pl *VMPlacement) NormalizeScore(_ context.Context, _ fwk.CycleState, _ *v1.Pod, scores fwk.NodeScoreList) *fwk.Status {
	return helper.DefaultNormalizeScore(fwk.MaxNodeScore, false, scores)
}
