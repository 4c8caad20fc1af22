package scheduler

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"

	v1 "k8s.io/api/core/v1"
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

// The benchmark's sizes: each run schedules benchPods pods, and the
// profiles are compared on each of benchNodeCounts nodes.
const (
	benchPods = 300
	// benchTimeout bounds each wait of the benchmark.
	benchTimeout = 10 * time.Minute
	// createWorkers is how many objects are created in parallel.
	createWorkers = 16
)

var benchNodeCounts = []int{1000, 5000}

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

// benchExtensionPoints are the extension points whose time per pod the
// benchmark reports.
var benchExtensionPoints = []string{"PreFilter", "Filter", "PreScore", "Score"}

// BenchmarkSchedulingThroughput schedules pods through a real
// kube-apiserver and kube-scheduler in this process, with the default
// plugins and with VMPlacement added, on 1,000 and then 5,000 nodes, and
// prints a table: pods/s of both profiles and their ratio, the scheduler's
// filter-and-score time per pod, the time per pod of each extension point
// (all plugins) and VMPlacement's own share of it. Each run schedules 300
// pods, half plain pods and half VM pods of four kinds interleaved (accel
// auto; accel kvm; CPU model EPYC, which a quarter of the nodes have; CPU
// feature avx2), with the RuntimeClass overhead vmpod ships. Run it with
// -benchtime 1x (make bench):
//
//	go test -run '^$' -bench '^BenchmarkSchedulingThroughput$' -benchtime 1x -timeout 30m ./test/integration/scheduler
//
// Each run creates its pods before its scheduler starts, measures from
// the first binding to the last (informer sync and start-up excluded),
// then deletes the pods, so every run sees the same empty nodes. The
// profiles run in the order A B B A A B B A on each node count, so that
// drift in the machine's load (other work on a shared 2-core machine
// halves a run's pods/s at times) falls on both alike. pods/s is over all
// of a profile's runs; the ratio is the median of the four ratios of
// neighbouring runs (A B, B A, A B, B A), which share the machine's state. The extension point times are
// kube-scheduler's own (framework_extension_point_duration_seconds; Filter
// is the whole parallel pass over the nodes); VMPlacement's are summed by
// timedVMPlacement over the cycles the framework samples for its plugin
// metrics. About 2 minutes on 2 cores.
func BenchmarkSchedulingThroughput(b *testing.B) {
	cp := controlplane.Start(b, controlplane.Options{})
	// The RuntimeClass vmpod ships: its overhead decides whether
	// VMPlacement's Filter can leave the memory check to NodeResourcesFit.
	createNamespace(b, cp.Client, shippedOverhead(b))
	var rows []benchRow
	created := 0
	for _, nodes := range benchNodeCounts {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			createBenchNodes(b, cp.Client, created, nodes)
			created = nodes
			rows = append(rows, benchProfiles(b, cp, nodes)...)
		})
	}
	printBenchTable(rows)
}

// benchRow is one profile's figures on one node count.
type benchRow struct {
	nodes   int
	profile string
	runs    []time.Duration // first to last binding
	// cpu is the process's CPU time per pod in the same spans: all of
	// the apiserver's, etcd's and the scheduler's work for it.
	cpu time.Duration
	// perPod are the scheduler's times per pod: the algorithm, then each
	// of benchExtensionPoints.
	algorithm time.Duration
	points    []time.Duration
	// plugin is VMPlacement's own time per pod at each extension point,
	// nil for the default profile.
	plugin []time.Duration
	// pairRatios are pods/s against the default profile's in the run
	// next to it (runs 1 and 2, 3 and 4, ...); ratio is their median.
	// Both are 0 for the default profile.
	pairRatios []float64
	ratio      float64
}

func (r benchRow) rate() float64 { return rate(r.runs...) }

// rate is pods/s over runs of benchPods pods each, first to last binding.
func rate(runs ...time.Duration) float64 {
	var total time.Duration
	for _, d := range runs {
		total += d
	}
	return float64(len(runs)*(benchPods-1)) / total.Seconds()
}

type benchProfile struct {
	name, scheduler, yaml string
	// timed runs VMPlacement through timedVMPlacement.
	timed bool
}

func benchProfiles(b *testing.B, cp *controlplane.ControlPlane, nodes int) []benchRow {
	def := benchProfile{"default", "bench-default", benchProfileDefault, false}
	vmp := benchProfile{"default+VMPlacement", "bench-vmplacement", benchProfileVMPlacement, true}
	rows := map[string]*benchRow{
		def.name: {nodes: nodes, profile: def.name, points: make([]time.Duration, len(benchExtensionPoints))},
		vmp.name: {nodes: nodes, profile: vmp.name, points: make([]time.Duration, len(benchExtensionPoints))},
	}
	var pt pluginTime
	for i, p := range []benchProfile{def, vmp, vmp, def, def, vmp, vmp, def} {
		scheduler := fmt.Sprintf("%s-%d-%d", p.scheduler, nodes, i)
		createBenchPods(b, cp.Client, scheduler)
		// Each run starts from a collected heap: the apiserver and etcd
		// in this process leave garbage behind that would otherwise fall
		// on whichever run comes next.
		runtime.GC()
		bound := watchBindings(b, cp.Client, scheduler)
		algorithmBefore := histogramSum(b, "scheduler_scheduling_algorithm_duration_seconds", nil)
		yaml := strings.Replace(p.yaml, p.scheduler, scheduler, 1)
		// The scheduler's goroutines carry the profile and node count as
		// pprof labels, so that a -cpuprofile splits by them
		// (go tool pprof -tagfocus profile=default).
		var stop func()
		labels := pprof.Labels("profile", p.name, "nodes", fmt.Sprint(nodes))
		pprof.Do(b.Context(), labels, func(context.Context) {
			if p.timed {
				stop = startSchedulerWith(b, cp, yaml, newTimedVMPlacement(&pt))
			} else {
				stop = startScheduler(b, cp, yaml)
			}
		})
		first, last, cpu := bound.waitAll(b, benchPods)
		stop()
		r := rows[p.name]
		r.runs = append(r.runs, last.Sub(first))
		r.cpu += cpu
		r.algorithm += histogramSum(b, "scheduler_scheduling_algorithm_duration_seconds", nil) - algorithmBefore
		for j, point := range benchExtensionPoints {
			r.points[j] += histogramSum(b, "scheduler_framework_extension_point_duration_seconds",
				map[string]string{"extension_point": point, "profile": scheduler})
		}
		deleteBenchPods(b, cp.Client, scheduler)
	}
	for _, r := range rows {
		pods := time.Duration(len(r.runs) * benchPods)
		r.cpu /= pods
		r.algorithm /= pods
		for j := range r.points {
			r.points[j] /= pods
		}
	}
	preFilter, filter, preScore, score := pt.perPod()
	rows[vmp.name].plugin = []time.Duration{preFilter, filter, preScore, score}
	for i, d := range rows[vmp.name].runs {
		rows[vmp.name].pairRatios = append(rows[vmp.name].pairRatios, rate(d)/rate(rows[def.name].runs[i]))
	}
	rows[vmp.name].ratio = median(rows[vmp.name].pairRatios)

	b.ReportMetric(rows[def.name].rate(), "pods/s-default")
	b.ReportMetric(rows[vmp.name].rate(), "pods/s-vmplacement")
	b.ReportMetric(rows[vmp.name].ratio, "ratio")
	b.ReportMetric(float64(filter.Microseconds()), "µs-VMPlacement-Filter/pod")
	return []benchRow{*rows[def.name], *rows[vmp.name]}
}

func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	if len(s) == 0 {
		return 0
	}
	return (s[(len(s)-1)/2] + s[len(s)/2]) / 2
}

// printBenchTable prints the rows as the table make bench shows.
func printBenchTable(rows []benchRow) {
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "\nscheduler: %d pods a run (half plain, half VM pods of 4 kinds); profiles run A B B A A B B A; times per pod\n", benchPods)
	fmt.Fprint(w, "nodes\tprofile\tpods/s\tratio\tCPU\tCPU ratio\talgorithm\t")
	for _, p := range benchExtensionPoints {
		fmt.Fprintf(w, "%s\t", p)
	}
	fmt.Fprint(w, "runs (pods/s)\tpair ratios\t\n")
	ms := func(d time.Duration) string { return fmt.Sprintf("%.3fms", float64(d)/float64(time.Millisecond)) }
	var defaultCPU time.Duration // of the default profile's row before
	for _, r := range rows {
		ratio := "-"
		if r.ratio > 0 {
			ratio = fmt.Sprintf("%.2f", r.ratio)
		}
		var runs []string
		for _, d := range r.runs {
			runs = append(runs, fmt.Sprintf("%.0f", rate(d)))
		}
		cpuRatio := "-"
		if r.ratio > 0 {
			cpuRatio = fmt.Sprintf("%.2f", float64(defaultCPU)/float64(r.cpu))
		} else {
			defaultCPU = r.cpu
		}
		fmt.Fprintf(w, "%d\t%s\t%.0f\t%s\t%s\t%s\t%s\t", r.nodes, r.profile, r.rate(), ratio, ms(r.cpu), cpuRatio, ms(r.algorithm))
		for _, d := range r.points {
			fmt.Fprintf(w, "%s\t", ms(d))
		}
		var pairs []string
		for _, x := range r.pairRatios {
			pairs = append(pairs, fmt.Sprintf("%.2f", x))
		}
		fmt.Fprintf(w, "%s\t%s\t\n", strings.Join(runs, ", "), strings.Join(pairs, ", "))
		if r.plugin != nil {
			fmt.Fprintf(w, "%d\tVMPlacement alone\t\t\t\t\t\t", r.nodes)
			for _, d := range r.plugin {
				fmt.Fprintf(w, "%s\t", ms(d))
			}
			fmt.Fprint(w, "sampled cycles\t\t\n")
		}
	}
	w.Flush()
}

// histogramSum is the sum so far of a histogram of the scheduler's (or of
// any component in this process, all in one registry), over its series
// whose labels include want.
func histogramSum(b *testing.B, name string, want map[string]string) time.Duration {
	mfs, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		b.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if have[k] != v {
					continue series
				}
			}
			sum += m.GetHistogram().GetSampleSum()
		}
	}
	return time.Duration(sum * float64(time.Second))
}

// createBenchNodes creates KVM nodes from to to-1 in four CPU-model
// flavours, every other one holding the test image.
func createBenchNodes(b *testing.B, c clientset.Interface, from, to int) {
	parallel(b, to-from, func(ctx context.Context, i int) error {
		i += from
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

// createBenchPods creates benchPods pods (benchPod) for the scheduler.
func createBenchPods(b *testing.B, c clientset.Interface, scheduler string) {
	parallel(b, benchPods, func(ctx context.Context, i int) error {
		pod := benchPod(fmt.Sprintf("%s-%04d", scheduler, i), i)
		pod.Spec.SchedulerName = scheduler
		_, err := c.CoreV1().Pods(namespace).Create(ctx, pod, metav1.CreateOptions{})
		return err
	})
}

// benchPod is the benchmarks' i-th pod: for even i a plain pod (100m,
// 256Mi), for odd i a VM pod of 1 vCPU and 1 GiB of four kinds in turn:
// accel auto; accel kvm; CPU model EPYC (a quarter of the nodes); CPU
// feature avx2.
func benchPod(name string, i int) *v1.Pod {
	if i%2 == 0 {
		pod := plainPod(name)
		pod.Spec.Containers[0].Resources.Requests = v1.ResourceList{
			v1.ResourceCPU:    resource.MustParse("100m"),
			v1.ResourceMemory: resource.MustParse("256Mi"),
		}
		return pod
	}
	p := vmspectest.MakePod(name).Namespace(namespace).CPU("1").Memory("1Gi")
	switch (i / 2) % 4 {
	case 1:
		p.Annotation(vmspec.AnnotationAccel, "kvm")
	case 2:
		p.Annotation(vmspec.AnnotationCPUModel, "EPYC")
	case 3:
		p.Annotation(vmspec.AnnotationCPUFeatures, "avx2")
	}
	return p.Obj()
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
	stop  func()        // stops the informer
	// firstCPU is the process's CPU time when the first binding was seen.
	firstCPU time.Duration
}

// processCPU is the CPU time (user and system) this process has used: the
// apiserver's, etcd's and the scheduler's alike.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// watchBindings starts an informer on the scheduler's pods; it stops when
// waitAll returns (or the benchmark ends), so that no run pays for the
// watches of the runs before it.
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
			if len(bd.seen) == 0 {
				bd.firstCPU = processCPU()
			}
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
	bd.stop = sync.OnceFunc(func() { cancel(); factory.Shutdown() })
	b.Cleanup(bd.stop)
	factory.WaitForCacheSync(ctx.Done())
	return bd
}

// waitAll waits (bounded) until n pods are bound and returns the first and
// last time a binding was seen, and the process's CPU time between the
// first binding and its return.
func (bd *bindings) waitAll(b *testing.B, n int) (first, last time.Time, cpu time.Duration) {
	defer bd.stop()
	timeout := time.After(benchTimeout)
	for range n {
		select {
		case <-bd.count:
		case <-timeout:
			b.Fatalf("%d of %d pods bound after %v", len(bd.seen), n, benchTimeout)
		}
	}
	cpu = processCPU()
	bd.mu.Lock()
	defer bd.mu.Unlock()
	cpu -= bd.firstCPU
	for _, t := range bd.seen {
		if first.IsZero() || t.Before(first) {
			first = t
		}
		if t.After(last) {
			last = t
		}
	}
	return first, last, cpu
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
