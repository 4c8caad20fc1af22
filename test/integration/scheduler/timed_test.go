package scheduler

import (
	"context"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/vmpod/vmpod/pkg/scheduler/vmplacement"
)

// pluginTime sums the time VMPlacement spends at each extension point, in
// the scheduling cycles the framework samples for its own plugin metrics
// (ShouldRecordPluginMetrics, one in ten), and counts those cycles. The
// framework's plugin_execution_duration_seconds cannot be used: its
// asynchronous recorder drops observations beyond 1,000 a second, and
// Filter makes one per node.
type pluginTime struct {
	cycles                             atomic.Int64
	preFilter, filter, preScore, score atomic.Int64 // nanoseconds
}

// perPod is the time per sampled cycle at each extension point.
func (t *pluginTime) perPod() (preFilter, filter, preScore, score time.Duration) {
	c := t.cycles.Load()
	if c == 0 {
		return 0, 0, 0, 0
	}
	per := func(ns *atomic.Int64) time.Duration { return time.Duration(ns.Load() / c) }
	return per(&t.preFilter), per(&t.filter), per(&t.preScore), per(&t.score)
}

// timedVMPlacement is VMPlacement with its extension points timed into
// pt: the same plugin, by the same constructor, under the same name.
type timedVMPlacement struct {
	pl *vmplacement.VMPlacement
	pt *pluginTime
}

var (
	_ fwk.PreFilterPlugin   = &timedVMPlacement{}
	_ fwk.FilterPlugin      = &timedVMPlacement{}
	_ fwk.PreScorePlugin    = &timedVMPlacement{}
	_ fwk.ScorePlugin       = &timedVMPlacement{}
	_ fwk.ReservePlugin     = &timedVMPlacement{}
	_ fwk.EnqueueExtensions = &timedVMPlacement{}
	_ fwk.SignPlugin        = &timedVMPlacement{}
)

// newTimedVMPlacement returns a plugin factory for the scheduler's registry.
func newTimedVMPlacement(pt *pluginTime) func(context.Context, runtime.Object, fwk.Handle) (fwk.Plugin, error) {
	return func(ctx context.Context, args runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
		pl, err := vmplacement.New(ctx, args, h)
		if err != nil {
			return nil, err
		}
		return &timedVMPlacement{pl: pl.(*vmplacement.VMPlacement), pt: pt}, nil
	}
}

// since adds the time since start to sum. The callers read the clock
// only in sampled cycles, as the framework does for its own plugin
// metrics: two clock reads on every Filter and Score call (about 100 ns
// each on the development VM, a thousand calls per VM pod on 5,000 nodes)
// would be a cost of this wrapper that the default profile does not pay.
func since(sum *atomic.Int64, start time.Time) {
	sum.Add(int64(time.Since(start)))
}

func (t *timedVMPlacement) Name() string { return t.pl.Name() }

func (t *timedVMPlacement) PreFilter(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	if !cs.ShouldRecordPluginMetrics() {
		return t.pl.PreFilter(ctx, cs, pod, nodes)
	}
	t.pt.cycles.Add(1)
	defer since(&t.pt.preFilter, time.Now())
	return t.pl.PreFilter(ctx, cs, pod, nodes)
}

func (t *timedVMPlacement) PreFilterExtensions() fwk.PreFilterExtensions {
	return t.pl.PreFilterExtensions()
}

func (t *timedVMPlacement) Filter(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, ni fwk.NodeInfo) *fwk.Status {
	if !cs.ShouldRecordPluginMetrics() {
		return t.pl.Filter(ctx, cs, pod, ni)
	}
	defer since(&t.pt.filter, time.Now())
	return t.pl.Filter(ctx, cs, pod, ni)
}

func (t *timedVMPlacement) PreScore(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) *fwk.Status {
	if !cs.ShouldRecordPluginMetrics() {
		return t.pl.PreScore(ctx, cs, pod, nodes)
	}
	defer since(&t.pt.preScore, time.Now())
	return t.pl.PreScore(ctx, cs, pod, nodes)
}

func (t *timedVMPlacement) Score(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, ni fwk.NodeInfo) (int64, *fwk.Status) {
	if !cs.ShouldRecordPluginMetrics() {
		return t.pl.Score(ctx, cs, pod, ni)
	}
	defer since(&t.pt.score, time.Now())
	return t.pl.Score(ctx, cs, pod, ni)
}

func (t *timedVMPlacement) ScoreExtensions() fwk.ScoreExtensions { return t }

// NormalizeScore counts as Score.
func (t *timedVMPlacement) NormalizeScore(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, scores fwk.NodeScoreList) *fwk.Status {
	if !cs.ShouldRecordPluginMetrics() {
		return t.pl.NormalizeScore(ctx, cs, pod, scores)
	}
	defer since(&t.pt.score, time.Now())
	return t.pl.NormalizeScore(ctx, cs, pod, scores)
}

func (t *timedVMPlacement) EventsToRegister(ctx context.Context) ([]fwk.ClusterEventWithHint, error) {
	return t.pl.EventsToRegister(ctx)
}

func (t *timedVMPlacement) SignPod(ctx context.Context, pod *v1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	return t.pl.SignPod(ctx, pod)
}

// Reserve is not timed: it checks one node per pod.
func (t *timedVMPlacement) Reserve(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, node string) *fwk.Status {
	return t.pl.Reserve(ctx, cs, pod, node)
}

func (t *timedVMPlacement) Unreserve(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, node string) {
	t.pl.Unreserve(ctx, cs, pod, node)
}
