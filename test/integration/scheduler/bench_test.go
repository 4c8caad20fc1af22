package scheduler

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	v1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/vmpod/vmpod/internal/testenv/controlplane"
	"github.com/vmpod/vmpod/pkg/vmspec"
	"github.com/vmpod/vmpod/pkg/vmspec/vmspectest"
)

const (
	benchNodes = 1000
	benchPods  = 1000
	// benchTimeout bounds each wait of the benchmark.
	benchTimeout = 10 * time.Minute
	// createWorkers is how many objects are created in parallel.
	createWorkers = 16
)

// The two profiles the benchmark compares: kube-scheduler's default
// plugins, and the same plus VMPlacement with its default args.
const (
	benchProfileDefault = `profiles:
- schedulerName: bench-default
`
	benchProfileVMPlacement = `profiles:
- schedulerName: bench-vmplacement
  plugins:
    multiPoint:
      enabled:
      - name: VMPlacement
`
)

// BenchmarkSchedulingThroughput schedules 1,000 VM pods onto 1,000 nodes
// through a real kube-apiserver and kube-scheduler in this process, with
// the default plugins and with VMPlacement added, and prints pods/s for
// both and their ratio, for two workloads:
//
//   - identical: 1,000 pods asking for the same VM (a Deployment of VMs);
//   - mixed: four kinds of VM (accel auto or kvm, a named CPU model, a
//     CPU feature) interleaved.
//
// Each comparison is one iteration; run it with -benchtime 1x:
//
//	go test -run '^$' -bench '^BenchmarkSchedulingThroughput$' -benchtime 1x -timeout 30m ./test/integration/scheduler
//
// Each run creates its 1,000 pods before its scheduler starts, measures
// from the first binding to the last (informer sync and start-up
// excluded), then deletes the pods, so every run sees the same empty
// nodes. Next to pods/s it prints the scheduler's own filter-and-score
// time per pod (scheduling_algorithm_duration_seconds), which the API
// round trips of binding do not blur. The profiles run in the order A B B A, so that drift in the
// machine's load falls on both alike.
func BenchmarkSchedulingThroughput(b *testing.B) {
	cp := controlplane.Start(b, controlplane.Options{})
	createBenchCluster(b, cp.Client)
	for _, mix := range []struct {
		name  string
		kinds int
	}{{"identical", 1}, {"mixed", 4}} {
		b.Run(mix.name, func(b *testing.B) { benchProfiles(b, cp, mix.name, mix.kinds) })
	}
}

func benchProfiles(b *testing.B, cp *controlplane.ControlPlane, mix string, kinds int) {
	type profile struct{ name, scheduler, yaml string }
	def := profile{"default plugins", "bench-default", benchProfileDefault}
	vmp := profile{"default plugins + VMPlacement", "bench-vmplacement", benchProfileVMPlacement}
	runs := map[string][]time.Duration{}
	algorithm := map[string]time.Duration{} // summed over the profile's runs
	for i, p := range []profile{def, vmp, vmp, def} {
		scheduler := fmt.Sprintf("%s-%s-%d", p.scheduler, mix, i)
		createBenchPods(b, cp.Client, scheduler, kinds)
		bound := watchBindings(b, cp.Client, scheduler)
		algorithmBefore := algorithmTime(b)
		stop := startScheduler(b, cp, strings.Replace(p.yaml, p.scheduler, scheduler, 1))
		first, last := bound.waitAll(b, benchPods)
		stop()
		algorithm[p.name] += algorithmTime(b) - algorithmBefore
		deleteBenchPods(b, cp.Client, scheduler)
		runs[p.name] = append(runs[p.name], last.Sub(first))
	}

	rate := func(ds ...time.Duration) float64 {
		var total time.Duration
		for _, d := range ds {
			total += d
		}
		return float64(len(ds)*(benchPods-1)) / total.Seconds()
	}
	without, with := rate(runs[def.name]...), rate(runs[vmp.name]...)
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	perPod := func(p profile) time.Duration { return algorithm[p.name] / time.Duration(len(runs[p.name])*benchPods) }
	fmt.Fprintf(w, "\n%d %s VM pods onto %d nodes\tpods/s\talgorithm/pod\truns (first to last binding)\t\n", benchPods, mix, benchNodes)
	for _, p := range []profile{def, vmp} {
		var ds []string
		for _, d := range runs[p.name] {
			ds = append(ds, fmt.Sprintf("%.0f pods/s in %v", rate(d), d.Round(time.Millisecond)))
		}
		fmt.Fprintf(w, "%s\t%.0f\t%v\t%s\t\n", p.name, rate(runs[p.name]...), perPod(p).Round(10*time.Microsecond), strings.Join(ds, ", "))
	}
	fmt.Fprintf(w, "ratio (with / without VMPlacement)\t%.2f\t%.2f\t\t\n", with/without, float64(perPod(vmp))/float64(perPod(def)))
	w.Flush()
	b.ReportMetric(without, "pods/s-default")
	b.ReportMetric(with, "pods/s-vmplacement")
	b.ReportMetric(with/without, "ratio")
	b.ReportMetric(float64(perPod(def).Microseconds()), "µs-algorithm/pod-default")
	b.ReportMetric(float64(perPod(vmp).Microseconds()), "µs-algorithm/pod-vmplacement")
}

// algorithmTime is the scheduler's scheduling_algorithm_duration_seconds
// sum so far: the time spent filtering and scoring, without binding and
// the API round trips that dominate pods/s.
func algorithmTime(b *testing.B) time.Duration {
	mfs, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "scheduler_scheduling_algorithm_duration_seconds" {
			var sum float64
			for _, m := range mf.GetMetric() {
				sum += m.GetHistogram().GetSampleSum()
			}
			return time.Duration(sum * float64(time.Second))
		}
	}
	return 0
}

// createBenchCluster creates the namespace, the vmpod RuntimeClass and
// benchNodes KVM nodes in four CPU-model flavours, every other one holding
// the test image.
func createBenchCluster(b *testing.B, c clientset.Interface) {
	ctx := b.Context()
	if _, err := c.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	rc := &nodev1.RuntimeClass{
		ObjectMeta: metav1.ObjectMeta{Name: "vmpod"},
		Handler:    "vmpod",
		Overhead:   &nodev1.Overhead{PodFixed: v1.ResourceList{v1.ResourceMemory: *resource.NewQuantity(podFixed, resource.BinarySI)}},
	}
	if _, err := c.NodeV1().RuntimeClasses().Create(ctx, rc, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	parallel(b, benchNodes, func(ctx context.Context, i int) error {
		n := vmNode(fmt.Sprintf("node-%04d", i), "64Gi").KVM().
			CPUModels(benchModels[i%len(benchModels)]).Features("avx2", "aes")
		if i%2 == 0 {
			n.Image(vmspectest.Image, 1<<30)
		}
		_, err := c.CoreV1().Nodes().Create(ctx, n.Obj(), metav1.CreateOptions{})
		return err
	})
}

var benchModels = []string{"Skylake-Client", "Cascadelake-Server", "EPYC", "Icelake-Server"}

// createBenchPods creates benchPods VM pods for the scheduler, 1 vCPU and
// 1 GiB each, of kinds (1 to 4) kinds in turn: accel auto; accel kvm; CPU
// model EPYC (a quarter of the nodes); CPU feature avx2.
func createBenchPods(b *testing.B, c clientset.Interface, scheduler string, kinds int) {
	parallel(b, benchPods, func(ctx context.Context, i int) error {
		p := vmspectest.MakePod(fmt.Sprintf("%s-%04d", scheduler, i)).Namespace(namespace).CPU("1").Memory("1Gi")
		switch i % kinds {
		case 1:
			p.Annotation(vmspec.AnnotationAccel, "kvm")
		case 2:
			p.Annotation(vmspec.AnnotationCPUModel, "EPYC")
		case 3:
			p.Annotation(vmspec.AnnotationCPUFeatures, "avx2")
		}
		pod := p.Obj()
		pod.Spec.SchedulerName = scheduler
		_, err := c.CoreV1().Pods(namespace).Create(ctx, pod, metav1.CreateOptions{})
		return err
	})
}

func deleteBenchPods(b *testing.B, c clientset.Interface, scheduler string) {
	ctx := b.Context()
	selector := fields.OneTermEqualSelector("spec.schedulerName", scheduler).String()
	zero := int64(0)
	if err := c.CoreV1().Pods(namespace).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero},
		metav1.ListOptions{FieldSelector: selector}); err != nil {
		b.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, benchTimeout, true, func(ctx context.Context) (bool, error) {
		l, err := c.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{FieldSelector: selector, Limit: 1})
		return err == nil && len(l.Items) == 0, err
	})
	if err != nil {
		b.Fatalf("pods of %s not deleted: %v", scheduler, err)
	}
}

// bindings records when the test first sees each pod of a scheduler bound.
type bindings struct {
	mu    sync.Mutex
	seen  map[string]time.Time
	count chan struct{} // one send per newly bound pod
}

// watchBindings starts an informer on the scheduler's pods; it stops when
// the benchmark ends.
func watchBindings(b *testing.B, c clientset.Interface, scheduler string) *bindings {
	bd := &bindings{seen: map[string]time.Time{}, count: make(chan struct{}, benchPods)}
	factory := informers.NewSharedInformerFactoryWithOptions(c, 0, informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.schedulerName", scheduler).String()
		}))
	record := func(obj any) {
		pod, ok := obj.(*v1.Pod)
		if !ok || pod.Spec.NodeName == "" {
			return
		}
		bd.mu.Lock()
		defer bd.mu.Unlock()
		if _, ok := bd.seen[pod.Name]; !ok {
			bd.seen[pod.Name] = time.Now()
			bd.count <- struct{}{}
		}
	}
	_, err := factory.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    record,
		UpdateFunc: func(_, obj any) { record(obj) },
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	factory.Start(ctx.Done())
	b.Cleanup(func() { cancel(); factory.Shutdown() })
	factory.WaitForCacheSync(ctx.Done())
	return bd
}

// waitAll waits (bounded) until n pods are bound and returns the first and
// last time a binding was seen.
func (bd *bindings) waitAll(b *testing.B, n int) (first, last time.Time) {
	timeout := time.After(benchTimeout)
	for range n {
		select {
		case <-bd.count:
		case <-timeout:
			b.Fatalf("%d of %d pods bound after %v", len(bd.seen), n, benchTimeout)
		}
	}
	bd.mu.Lock()
	defer bd.mu.Unlock()
	for _, t := range bd.seen {
		if first.IsZero() || t.Before(first) {
			first = t
		}
		if t.After(last) {
			last = t
		}
	}
	return first, last
}

// parallel runs create(i) for i in [0, n) on createWorkers goroutines and
// fails the benchmark on the first error.
func parallel(b *testing.B, n int, create func(ctx context.Context, i int) error) {
	ctx, cancel := context.WithCancelCause(b.Context())
	defer cancel(nil)
	next := make(chan int)
	var wg sync.WaitGroup
	for range createWorkers {
		wg.Go(func() {
			for i := range next {
				if err := create(ctx, i); err != nil {
					cancel(err)
				}
			}
		})
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		b.Fatal(err)
	}
}
