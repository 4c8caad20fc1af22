package vmplacement_test

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/defaultbinder"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/queuesort"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/kubernetes/pkg/scheduler/metrics"

	"github.com/vmpod/vmpod/pkg/scheduler/vmplacement"
	"github.com/vmpod/vmpod/pkg/vmspec"
)

// nodeWrapper builds nodes as the labeller labels them.
type nodeWrapper struct{ v1.Node }

// makeNode is a TCG-only vmpod node: 16 CPUs, 16Gi allocatable, QEMU's
// q35 machine, up to 16 vCPUs, no UEFI.
func makeNode(name string) *nodeWrapper {
	n := &nodeWrapper{v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			v1.LabelHostname:                         name,
			vmspec.LabelRuntime:                      "true",
			vmspec.LabelKVM:                          "false",
			vmspec.LabelTCG:                          "true",
			vmspec.LabelHostPassthrough:              "false",
			vmspec.LabelUEFI:                         "false",
			vmspec.LabelMaxVCPUs:                     "16",
			vmspec.LabelHostCPUModel:                 "qemu64",
			vmspec.LabelMachinePrefix + "q35":        "true",
			vmspec.LabelMachinePrefix + "pc-q35-7.2": "true",
		}},
	}}
	return n.Memory("16Gi")
}

// KVM makes the node a KVM node with host-passthrough, a named host
// model, the Skylake-Client model and a few features.
func (n *nodeWrapper) KVM() *nodeWrapper {
	return n.Label(vmspec.LabelKVM, "true").
		Label(vmspec.LabelHostPassthrough, "true").
		Label(vmspec.LabelHostCPUModel, "Skylake-Client-IBRS").
		Label(vmspec.LabelCPUModelPrefix+"Skylake-Client", "true").
		Label(vmspec.LabelCPUFeaturePrefix+"avx2", "true").
		Label(vmspec.LabelCPUFeaturePrefix+"aes", "true")
}

func (n *nodeWrapper) Label(k, v string) *nodeWrapper { n.Labels[k] = v; return n }

func (n *nodeWrapper) Unlabel(k string) *nodeWrapper { delete(n.Labels, k); return n }

func (n *nodeWrapper) Memory(q string) *nodeWrapper {
	n.Status.Allocatable = v1.ResourceList{
		v1.ResourceCPU:    resource.MustParse("16"),
		v1.ResourceMemory: resource.MustParse(q),
		v1.ResourcePods:   resource.MustParse("110"),
	}
	n.Status.Capacity = n.Status.Allocatable
	return n
}

// MemoryBytes sets allocatable memory to exactly b bytes.
func (n *nodeWrapper) MemoryBytes(b int64) *nodeWrapper {
	n.Memory("0")
	n.Status.Allocatable[v1.ResourceMemory] = *resource.NewQuantity(b, resource.BinarySI)
	return n
}

func (n *nodeWrapper) Image(name string, size int64) *nodeWrapper {
	n.Status.Images = append(n.Status.Images, v1.ContainerImage{Names: []string{name}, SizeBytes: size})
	return n
}

func (n *nodeWrapper) Obj() *v1.Node { return &n.Node }

// defaulted sets each container's missing requests to its limits, as the
// API server's defaulting does for a pod it admits.
func defaulted(p *v1.Pod) *v1.Pod {
	for i := range p.Spec.Containers {
		r := &p.Spec.Containers[i].Resources
		for name, q := range r.Limits {
			if _, ok := r.Requests[name]; !ok {
				if r.Requests == nil {
					r.Requests = v1.ResourceList{}
				}
				r.Requests[name] = q
			}
		}
	}
	return p
}

// withRequest sets the memory request of the pod's first container.
func withRequest(p *v1.Pod, q string) *v1.Pod {
	r := &p.Spec.Containers[0].Resources
	if r.Requests == nil {
		r.Requests = v1.ResourceList{}
	}
	r.Requests[v1.ResourceMemory] = resource.MustParse(q)
	return defaulted(p)
}

// withOverhead sets pod.spec.overhead memory, as RuntimeClass admission
// does from the RuntimeClass's overhead.podFixed.
func withOverhead(p *v1.Pod, q string) *v1.Pod {
	p.Spec.Overhead = v1.ResourceList{v1.ResourceMemory: resource.MustParse(q)}
	return p
}

// plainPod is a pod without a RuntimeClass that requests memory.
func plainPod(name, memory string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
		Spec: v1.PodSpec{Containers: []v1.Container{{
			Name: "c", Image: "busybox",
			Resources: v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceMemory: resource.MustParse(memory)}},
		}}},
	}
}

// footprint is what a VM of that size takes on a node under the
// accelerator: guest RAM plus the overhead model, whatever its constants.
func footprint(guest int64, vcpus int, kvm bool) int64 {
	return guest + int64(vmspec.OverheadFor(kvm).Bytes(uint64(guest), vcpus))
}

const (
	mi = int64(1) << 20
	gi = int64(1) << 30
)

// testFramework is a scheduling framework with the default queue sort and
// binder and VMPlacement at PreFilter, Filter, PreScore, Score and
// Reserve, built by frameworkruntime.NewFramework from a profile whose
// pluginConfig holds args as JSON, as kube-scheduler builds it from a
// configuration file.
type testFramework struct {
	framework.Framework
	snapshot *cache.Snapshot
	ctx      context.Context
	args     runtime.Object
}

func newTestFramework(t testing.TB, args string, nodes []*v1.Node, pods []*v1.Pod) *testFramework {
	t.Helper()
	return newTestFrameworkWith(t, args, nodes, pods)
}

// newTestFrameworkWith is newTestFramework with more options for
// NewFramework, applied after the snapshot's (so one may replace it).
func newTestFrameworkWith(t testing.TB, args string, nodes []*v1.Node, pods []*v1.Pod, opts ...frameworkruntime.Option) *testFramework {
	t.Helper()
	metrics.Register() // the framework counts enabled plugins; once per process
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)

	snapshot := cache.NewSnapshot(pods, nodes)
	enabled := func(names ...string) config.PluginSet {
		var s config.PluginSet
		for _, n := range names {
			s.Enabled = append(s.Enabled, config.Plugin{Name: n, Weight: 1})
		}
		return s
	}
	profile := &config.KubeSchedulerProfile{
		SchedulerName: "test",
		Plugins: &config.Plugins{
			QueueSort: enabled(queuesort.Name),
			Bind:      enabled(defaultbinder.Name),
			PreFilter: enabled(vmplacement.Name),
			Filter:    enabled(vmplacement.Name),
			PreScore:  enabled(vmplacement.Name),
			Score:     enabled(vmplacement.Name),
			Reserve:   enabled(vmplacement.Name),
		},
	}
	var pluginArgs runtime.Object
	if args != "" {
		pluginArgs = &runtime.Unknown{Raw: []byte(args), ContentType: runtime.ContentTypeJSON}
		profile.PluginConfig = []config.PluginConfig{{Name: vmplacement.Name, Args: pluginArgs}}
	}
	registry := frameworkruntime.Registry{
		queuesort.Name:     queuesort.New,
		defaultbinder.Name: defaultbinder.New,
		vmplacement.Name:   vmplacement.New,
	}
	opts = append([]frameworkruntime.Option{frameworkruntime.WithSnapshotSharedLister(snapshot)}, opts...)
	fw, err := frameworkruntime.NewFramework(ctx, registry, profile, opts...)
	if err != nil {
		t.Fatalf("NewFramework: %v", err)
	}
	return &testFramework{Framework: fw, snapshot: snapshot, ctx: ctx, args: pluginArgs}
}

// plugin builds a VMPlacement with the framework's args over the
// framework's handle, for calling one extension point on its own.
func (f *testFramework) plugin(t testing.TB) fwk.Plugin {
	t.Helper()
	pl, err := vmplacement.New(f.ctx, f.args, f.Framework)
	if err != nil {
		t.Fatal(err)
	}
	return pl
}

func (f *testFramework) nodeInfo(t testing.TB, name string) fwk.NodeInfo {
	t.Helper()
	ni, err := f.snapshot.NodeInfos().Get(name)
	if err != nil {
		t.Fatalf("node %q: %v", name, err)
	}
	return ni
}

// result is a status as tests compare it.
type result struct {
	Code    string
	Reasons []string
}

func resultOf(st *fwk.Status) result {
	if st.IsSuccess() {
		return result{Code: fwk.Success.String()}
	}
	return result{Code: st.Code().String(), Reasons: st.Reasons()}
}

var success = result{Code: fwk.Success.String()}

// filter runs the profile's PreFilter and Filter plugins for the pod on
// one node, as a scheduling cycle does.
func (f *testFramework) filter(t testing.TB, pod *v1.Pod, node string) result {
	t.Helper()
	state := framework.NewCycleState()
	_, st, _ := f.RunPreFilterPlugins(f.ctx, state, pod)
	if !st.IsSuccess() {
		return resultOf(st)
	}
	return resultOf(f.RunFilterPlugins(f.ctx, state, pod, f.nodeInfo(t, node)))
}

// scores runs PreScore and Score (with NormalizeScore) over every node of
// the snapshot and returns each node's total score.
func (f *testFramework) scores(t testing.TB, pod *v1.Pod) map[string]int64 {
	t.Helper()
	state := framework.NewCycleState()
	if _, st, _ := f.RunPreFilterPlugins(f.ctx, state, pod); !st.IsSuccess() {
		t.Fatalf("PreFilter: %v", st)
	}
	nodes, err := f.snapshot.NodeInfos().List()
	if err != nil {
		t.Fatal(err)
	}
	if st := f.RunPreScorePlugins(f.ctx, state, pod, nodes); !st.IsSuccess() {
		t.Fatalf("PreScore: %v", st)
	}
	list, st := f.RunScorePlugins(f.ctx, state, pod, nodes)
	if !st.IsSuccess() {
		t.Fatalf("Score: %v", st)
	}
	got := map[string]int64{}
	for _, s := range list {
		got[s.Name] = s.TotalScore
	}
	return got
}
