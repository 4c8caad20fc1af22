package vmd

import (
	"bytes"
	"net/http"
	"time"

	cg1 "github.com/containerd/cgroups/v3/cgroup1/stats"
	cg2 "github.com/containerd/cgroups/v3/cgroup2/stats"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/vmpod/vmpod/pkg/vm"
)

// metrics are the node's VM metrics, on a registry of the Service's own
// (docs/metrics.md lists each). Events are counted where they happen;
// what the node holds now is read at each scrape (vmCollector).
type metrics struct {
	reg       *prometheus.Registry
	starts    *prometheus.CounterVec
	phases    *prometheus.HistogramVec
	exits     *prometheus.CounterVec
	execs     *prometheus.HistogramVec
	recovered *prometheus.CounterVec
}

// durationBuckets span 5 ms to about 80 s: an exec's round trip to a
// start phase under TCG on a loaded node.
var durationBuckets = prometheus.ExponentialBuckets(0.005, 2, 15)

func newMetrics(s *Service) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		starts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vmpod_vm_starts_total", Help: "VM starts, by result (ok, error).",
		}, []string{"result"}),
		phases: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "vmpod_vm_start_phase_seconds", Help: "How long each phase of a VM's making and start took (intake, network, overlay, jail, define, qemu, ...).",
			Buckets: durationBuckets,
		}, []string{"phase"}),
		exits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vmpod_vm_exits_total", Help: "VMs that stopped, by the reason of their exit (Completed, GuestPanicked, QEMUKilled, OOMKilled, ...).",
		}, []string{"reason"}),
		execs: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "vmpod_exec_duration_seconds", Help: "Commands run in guests through their agent, by result: ran (any exit code), failed (the guest could not run it: 126, 127), error (timeout, VM stopped).",
			Buckets: durationBuckets,
		}, []string{"result"}),
		recovered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vmpod_vm_recoveries_total", Help: "VMs found by a restarted vm-runtime, by what it did: adopted (running on), undone, released (no shim served its pod any more: removed with its pod's dir).",
		}, []string{"result"}),
	}
	m.reg.MustRegister(m.starts, m.phases, m.exits, m.execs, m.recovered, vmCollector{s},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// started counts a start and its phases.
func (m *metrics) started(p vm.Phases, err error) {
	if err != nil {
		m.starts.WithLabelValues("error").Inc()
		return
	}
	m.starts.WithLabelValues("ok").Inc()
	for _, ph := range p {
		m.phases.WithLabelValues(ph.Name).Observe(ph.Took.Seconds())
	}
}

// execDone counts an exec that took d: an error, a command the guest
// could not run (Exec's 126 or 127 with vmpod's reason), or one that ran.
func (m *metrics) execDone(d time.Duration, res vm.ExecResult, err error) {
	result := "ran"
	switch {
	case err != nil:
		result = "error"
	case (res.ExitCode == 126 || res.ExitCode == 127) && bytes.HasPrefix(res.Stderr, []byte("vmpod: ")):
		result = "failed"
	}
	m.execs.WithLabelValues(result).Observe(d.Seconds())
}

// MetricsHandler serves the node's VM metrics in Prometheus's formats.
func (s *Service) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{})
}

// vmCollector reads what the node's VMs are now, at each scrape.
type vmCollector struct{ s *Service }

var (
	vmsDesc  = prometheus.NewDesc("vmpod_vms", "VMs on the node, by state (created, running, stopped).", []string{"state"}, nil)
	infoDesc = prometheus.NewDesc("vmpod_vm_info", "One series per VM on the node, 1, with its pod and state.",
		[]string{"namespace", "pod", "id", "domain", "state"}, nil)
	guestMemDesc = prometheus.NewDesc("vmpod_vm_guest_memory_bytes", "A running VM's guest RAM (the container's memory limit, rounded).",
		[]string{"namespace", "pod"}, nil)
	usageDesc = prometheus.NewDesc("vmpod_vm_memory_usage_bytes", "What a running VM's QEMU cgroup uses: guest RAM QEMU touched, plus QEMU itself.",
		[]string{"namespace", "pod"}, nil)
	limitDesc = prometheus.NewDesc("vmpod_vm_memory_limit_bytes", "A running VM's QEMU cgroup limit: guest RAM plus the overhead model's share (docs/overhead.md).",
		[]string{"namespace", "pod"}, nil)
)

func (vmCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{vmsDesc, infoDesc, guestMemDesc, usageDesc, limitDesc} {
		ch <- d
	}
}

func (c vmCollector) Collect(ch chan<- prometheus.Metric) {
	counts := map[State]int{Created: 0, Running: 0, Stopped: 0}
	for _, r := range c.s.List() {
		counts[r.State]++
		ch <- prometheus.MustNewConstMetric(infoDesc, prometheus.GaugeValue, 1, r.Namespace, r.Pod, r.ID, r.Spec.Name, string(r.State))
		if r.State != Running {
			continue
		}
		ch <- prometheus.MustNewConstMetric(guestMemDesc, prometheus.GaugeValue, float64(r.Spec.MemoryBytes), r.Namespace, r.Pod)
		m, _, err := c.s.Stats(r.ID)
		if err != nil {
			continue // stopped since
		}
		if usage, limit, ok := memoryOf(m); ok {
			ch <- prometheus.MustNewConstMetric(usageDesc, prometheus.GaugeValue, float64(usage), r.Namespace, r.Pod)
			if limit > 0 {
				ch <- prometheus.MustNewConstMetric(limitDesc, prometheus.GaugeValue, float64(limit), r.Namespace, r.Pod)
			}
		}
	}
	for st, n := range counts {
		ch <- prometheus.MustNewConstMetric(vmsDesc, prometheus.GaugeValue, float64(n), string(st))
	}
}

// memoryOf is the memory usage and limit (0: none) of cgroup metrics, v1
// or v2.
func memoryOf(m any) (usage, limit uint64, ok bool) {
	switch m := m.(type) {
	case *cg1.Metrics:
		u := m.GetMemory().GetUsage()
		usage, limit = u.GetUsage(), u.GetLimit()
	case *cg2.Metrics:
		usage, limit = m.GetMemory().GetUsage(), m.GetMemory().GetUsageLimit()
	default:
		return 0, 0, false
	}
	if limit >= 1<<62 { // "none", as a page-rounded max
		limit = 0
	}
	return usage, limit, true
}
