package scheduler

import (
	"context"
	"fmt"
	"runtime/pprof"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/latest"
	"k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/names"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/kubernetes/pkg/scheduler/metrics"

	"github.com/vmpod/vmpod/pkg/scheduler/vmplacement"
	"github.com/vmpod/vmpod/pkg/vmspec/vmspectest"
)

// BenchmarkSchedulingCycle is the scheduling algorithm of
// BenchmarkSchedulingThroughput alone, without the apiserver, etcd and
// the other goroutines whose load makes that benchmark's pods/s vary: the
// default profile's plugins, and the same plus VMPlacement, built by
// frameworkruntime.NewFramework from kube-scheduler's defaulted
// configuration (less DynamicResources), over one snapshot of the
// benchmark's nodes (1,000 and 5,000, four CPU models, every other node
// holding the VM image) with 300 of its pods already placed, one on every
// 37th node in turn, as midway through its runs. Each iteration takes the
// benchmark's eight pods (four plain pods and four VM pods: accel auto,
// accel kvm, CPU model EPYC, CPU feature avx2, with the shipped
// RuntimeClass's overhead) through what kube-scheduler's
// findNodesThatFitPod and prioritizeNodes do for each, once with each
// profile, and times the two apart: PreFilter, the look-up of the nodes
// PreFilter names, Filter on the nodes in turn from where the last pod
// stopped until percentageOfNodesToScore of them are feasible, PreScore,
// and Score with NormalizeScore. It runs them in this goroutine (the
// scheduler runs Filter and Score on 16) and binds no pod. It reports
// each profile's time per pod and the ratio of the default profile's to
// VMPlacement's, which is what VMPlacement leaves of the scheduler's
// throughput where the algorithm is the bottleneck.
//
//	go test -run '^$' -bench BenchmarkSchedulingCycle -benchtime 200x ./test/integration/scheduler
func BenchmarkSchedulingCycle(b *testing.B) {
	metrics.Register()
	overhead := shippedOverhead(b)
	pods := cyclePods(overhead)
	for _, nodes := range benchNodeCounts {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			var objs []*v1.Node
			for i := range nodes {
				n := vmNode(fmt.Sprintf("node-%04d", i), "64Gi").KVM().
					CPUModels(benchModels[i%len(benchModels)]).Features("avx2", "aes")
				if i%2 == 0 {
					n.Image(vmspectest.Image, 1<<30)
				}
				objs = append(objs, n.Obj())
			}
			var placed []*v1.Pod
			for i := range benchPods {
				p := pods[i%len(pods)].DeepCopy()
				p.Name, p.UID = fmt.Sprintf("placed-%d", i), types.UID(fmt.Sprintf("uid-placed-%d", i))
				p.Spec.NodeName = objs[i*37%nodes].Name
				placed = append(placed, p)
			}
			def := newCycleFramework(b, objs, placed, false)
			vmp := newCycleFramework(b, objs, placed, true)
			var defStart, vmpStart int
			var defTime, vmpTime time.Duration
			b.ReportAllocs()
			for b.Loop() {
				t0 := time.Now()
				pprof.Do(def.ctx, pprof.Labels("profile", "default", "nodes", fmt.Sprint(nodes)), func(context.Context) {
					for _, pod := range pods {
						def.schedule(b, pod, &defStart)
					}
				})
				t1 := time.Now()
				pprof.Do(vmp.ctx, pprof.Labels("profile", "default+VMPlacement", "nodes", fmt.Sprint(nodes)), func(context.Context) {
					for _, pod := range pods {
						vmp.schedule(b, pod, &vmpStart)
					}
				})
				t2 := time.Now()
				defTime += t1.Sub(t0)
				vmpTime += t2.Sub(t1)
			}
			perPod := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(b.N*len(pods)) }
			b.ReportMetric(perPod(defTime), "ns/pod-default")
			b.ReportMetric(perPod(vmpTime), "ns/pod-vmplacement")
			b.ReportMetric(float64(defTime)/float64(vmpTime), "ratio")
		})
	}
}

// cyclePods are BenchmarkSchedulingThroughput's pods, one of each kind,
// as the apiserver admits them (requests defaulted from limits, the
// RuntimeClass's overhead).
func cyclePods(overhead v1.ResourceList) []*v1.Pod {
	var pods []*v1.Pod
	for i := range 8 {
		name := fmt.Sprintf("p-%d", i)
		pod := benchPod(name, i)
		pod.UID = types.UID("uid-" + name)
		if i%2 == 0 {
			pods = append(pods, pod)
			continue
		}
		for i := range pod.Spec.Containers {
			r := &pod.Spec.Containers[i].Resources
			if r.Requests == nil {
				r.Requests = v1.ResourceList{}
			}
			for k, q := range r.Limits {
				if _, ok := r.Requests[k]; !ok {
					r.Requests[k] = q
				}
			}
		}
		pod.Spec.Overhead = overhead
		pods = append(pods, pod)
	}
	return pods
}

type cycleFramework struct {
	framework.Framework
	ctx      context.Context
	snapshot *cache.Snapshot
	nodes    []fwk.NodeInfo
}

// newCycleFramework builds kube-scheduler's default profile, with
// VMPlacement added at multiPoint if withPlugin, over a snapshot of the
// nodes and pods, with a fake clientset's informers (VMPlacement follows nodes
// and pods through them).
func newCycleFramework(b *testing.B, nodes []*v1.Node, pods []*v1.Pod, withPlugin bool) *cycleFramework {
	b.Helper()
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), klog.Background()))
	cfg, err := latest.Default()
	if err != nil {
		b.Fatal(err)
	}
	profile := &cfg.Profiles[0]
	// DynamicResources needs the scheduler's DRA manager, which only
	// scheduler.New builds; no pod here claims a device.
	profile.Plugins.MultiPoint.Enabled = slices.DeleteFunc(profile.Plugins.MultiPoint.Enabled,
		func(p config.Plugin) bool { return p.Name == names.DynamicResources })
	registry := plugins.NewInTreeRegistry()
	if withPlugin {
		profile.Plugins.MultiPoint.Enabled = append(profile.Plugins.MultiPoint.Enabled, config.Plugin{Name: vmplacement.Name})
		if err := registry.Register(vmplacement.Name, vmplacement.New); err != nil {
			b.Fatal(err)
		}
	}
	var objs []runtime.Object
	for _, n := range nodes {
		objs = append(objs, n)
	}
	client := fake.NewClientset(objs...)
	factory := informers.NewSharedInformerFactory(client, 0)
	snapshot := cache.NewSnapshot(pods, nodes)
	fw, err := frameworkruntime.NewFramework(ctx, registry, profile,
		frameworkruntime.WithClientSet(client),
		frameworkruntime.WithInformerFactory(factory),
		frameworkruntime.WithSnapshotSharedLister(snapshot))
	if err != nil {
		b.Fatalf("NewFramework: %v", err)
	}
	factory.Start(ctx.Done())
	b.Cleanup(func() { cancel(); factory.Shutdown() })
	factory.WaitForCacheSync(ctx.Done())
	infos, err := snapshot.NodeInfos().List()
	if err != nil {
		b.Fatal(err)
	}
	c := &cycleFramework{Framework: fw, ctx: ctx, snapshot: snapshot, nodes: infos}
	// VMPlacement skips Filter only once it has seen a Reserve call.
	start := 0
	pod := plainPod("reserve")
	state, node := c.schedule(b, pod, &start)
	if st := fw.RunReservePluginsReserve(ctx, state, pod, node); !st.IsSuccess() {
		b.Fatalf("Reserve: %v", st)
	}
	return c
}

// schedule takes the pod through one scheduling cycle's algorithm, as
// kube-scheduler's findNodesThatFitPod and prioritizeNodes do, and
// returns the cycle's state and a feasible node; the snapshot stays as it
// is.
func (c *cycleFramework) schedule(b *testing.B, pod *v1.Pod, start *int) (fwk.CycleState, string) {
	state := framework.NewCycleState()
	res, st, _ := c.RunPreFilterPlugins(c.ctx, state, pod)
	if !st.IsSuccess() {
		b.Fatalf("PreFilter of %s: %v", pod.Name, st)
	}
	nodes := c.nodes
	if !res.AllNodes() {
		nodes = make([]fwk.NodeInfo, 0, len(res.NodeNames))
		for name := range res.NodeNames {
			if ni, err := c.snapshot.NodeInfos().Get(name); err == nil {
				nodes = append(nodes, ni)
			}
		}
	}
	want := numFeasibleNodesToFind(len(nodes))
	feasible := make([]fwk.NodeInfo, 0, want)
	for i := 0; i < len(nodes) && len(feasible) < want; i++ {
		ni := nodes[(*start+i)%len(nodes)]
		if c.RunFilterPlugins(c.ctx, state, pod, ni).IsSuccess() {
			feasible = append(feasible, ni)
		}
	}
	*start = (*start + len(feasible)) % len(c.nodes)
	if len(feasible) < 2 {
		b.Fatalf("%s: %d feasible nodes", pod.Name, len(feasible))
	}
	if st := c.RunPreScorePlugins(c.ctx, state, pod, feasible); !st.IsSuccess() {
		b.Fatalf("PreScore of %s: %v", pod.Name, st)
	}
	if _, st := c.RunScorePlugins(c.ctx, state, pod, feasible); !st.IsSuccess() {
		b.Fatalf("Score of %s: %v", pod.Name, st)
	}
	return state, feasible[0].Node().Name
}

// numFeasibleNodesToFind is kube-scheduler's number of feasible nodes
// after which it stops filtering, with percentageOfNodesToScore unset.
func numFeasibleNodesToFind(nodes int) int {
	const minNodes, minPercentage = 100, 5
	if nodes < minNodes {
		return nodes
	}
	percentage := max(50-nodes/125, minPercentage)
	return max(nodes*percentage/100, minNodes)
}
