package cri

import (
	"context"
	"sort"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The metrics ListPodSandboxMetrics reports, under cAdvisor's names and
// labels, so that a kubelet that takes its stats from the CRI
// (PodAndContainerStatsFromCRI) serves VM pods at /metrics/cadvisor as
// cAdvisor serves containers: a VM pod's container is its VM, whose
// usage is QEMU's cgroup's; the pod's network is the pod interface's,
// which is the guest's.
var (
	containerLabels = []string{"container", "id", "image", "name", "namespace", "pod"}
	networkLabels   = append(append([]string{}, containerLabels...), "interface")
)

// metricDesc is one metric: its descriptor and how a sample of it is read
// from the CRI's stats.
type metricDesc struct {
	name, help string
	typ        runtimeapi.MetricType
	network    bool
	// of reads the value; false: the stats carry none.
	ofContainer func(*runtimeapi.ContainerStats) (uint64, bool)
	ofNetwork   func(*runtimeapi.NetworkInterfaceUsage) (uint64, bool)
	div         uint64 // the value's divisor (ns -> s); 0: 1
}

func u64(v *runtimeapi.UInt64Value) (uint64, bool) {
	if v == nil {
		return 0, false
	}
	return v.Value, true
}

var metricDescs = []metricDesc{
	{name: "container_cpu_usage_seconds_total", help: "Cumulative cpu time consumed in seconds.", typ: runtimeapi.MetricType_COUNTER,
		ofContainer: func(s *runtimeapi.ContainerStats) (uint64, bool) { return u64(s.GetCpu().GetUsageCoreNanoSeconds()) }, div: 1e9},
	{name: "container_memory_usage_bytes", help: "Current memory usage in bytes, including all memory regardless of when it was accessed", typ: runtimeapi.MetricType_GAUGE,
		ofContainer: func(s *runtimeapi.ContainerStats) (uint64, bool) { return u64(s.GetMemory().GetUsageBytes()) }},
	{name: "container_memory_working_set_bytes", help: "Current working set in bytes.", typ: runtimeapi.MetricType_GAUGE,
		ofContainer: func(s *runtimeapi.ContainerStats) (uint64, bool) { return u64(s.GetMemory().GetWorkingSetBytes()) }},
	{name: "container_memory_rss", help: "Size of RSS in bytes.", typ: runtimeapi.MetricType_GAUGE,
		ofContainer: func(s *runtimeapi.ContainerStats) (uint64, bool) { return u64(s.GetMemory().GetRssBytes()) }},
	{name: "container_network_receive_bytes_total", help: "Cumulative count of bytes received", typ: runtimeapi.MetricType_COUNTER, network: true,
		ofNetwork: func(i *runtimeapi.NetworkInterfaceUsage) (uint64, bool) { return u64(i.GetRxBytes()) }},
	{name: "container_network_transmit_bytes_total", help: "Cumulative count of bytes transmitted", typ: runtimeapi.MetricType_COUNTER, network: true,
		ofNetwork: func(i *runtimeapi.NetworkInterfaceUsage) (uint64, bool) { return u64(i.GetTxBytes()) }},
}

// ListMetricDescriptors describes what ListPodSandboxMetrics reports.
func (s *Server) ListMetricDescriptors(context.Context, *runtimeapi.ListMetricDescriptorsRequest) (*runtimeapi.ListMetricDescriptorsResponse, error) {
	resp := &runtimeapi.ListMetricDescriptorsResponse{}
	for _, d := range metricDescs {
		keys := containerLabels
		if d.network {
			keys = networkLabels
		}
		resp.Descriptors = append(resp.Descriptors, &runtimeapi.MetricDescriptor{Name: d.name, Help: d.help, LabelKeys: keys})
	}
	return resp, nil
}

// ListPodSandboxMetrics is every sandbox's metrics, from the stats
// ListPodSandboxStats reports.
func (s *Server) ListPodSandboxMetrics(ctx context.Context, _ *runtimeapi.ListPodSandboxMetricsRequest) (*runtimeapi.ListPodSandboxMetricsResponse, error) {
	resp := &runtimeapi.ListPodSandboxMetricsResponse{}
	for _, sb := range snapshot(&s.mu, s.sandboxes) {
		st, err := s.sandboxStats(sb)
		if err != nil {
			return nil, err
		}
		images := map[string]string{}
		for _, c := range s.containersOf(sb.Get().ID) {
			rec := c.Get()
			images[rec.ID] = rec.Image
		}
		resp.PodMetrics = append(resp.PodMetrics, metricsOf(st, images))
	}
	sort.Slice(resp.PodMetrics, func(i, j int) bool { return resp.PodMetrics[i].PodSandboxId < resp.PodMetrics[j].PodSandboxId })
	return resp, nil
}

// metricsOf turns a sandbox's stats into its metrics: each running
// container's CPU and memory, and the pod network's counters (container
// "POD", as cAdvisor labels the sandbox's). images are the containers'
// images by id.
func metricsOf(st *runtimeapi.PodSandboxStats, images map[string]string) *runtimeapi.PodSandboxMetrics {
	pod := st.GetAttributes()
	out := &runtimeapi.PodSandboxMetrics{PodSandboxId: pod.GetId()}
	podName, podNamespace := pod.GetMetadata().GetName(), pod.GetMetadata().GetNamespace()
	for _, c := range st.GetLinux().GetContainers() {
		if c.GetCpu() == nil && c.GetMemory() == nil {
			continue // not running
		}
		id := c.GetAttributes().GetId()
		labels := []string{c.GetAttributes().GetMetadata().GetName(), id, images[id], id, podNamespace, podName}
		cm := &runtimeapi.ContainerMetrics{ContainerId: id}
		for _, d := range metricDescs {
			if d.ofContainer == nil {
				continue
			}
			if v, ok := d.ofContainer(c); ok {
				cm.Metrics = append(cm.Metrics, metric(d, labels, v))
			}
		}
		out.ContainerMetrics = append(out.ContainerMetrics, cm)
	}
	nw := st.GetLinux().GetNetwork()
	for _, iface := range nw.GetInterfaces() {
		labels := []string{"POD", pod.GetId(), "", pod.GetId(), podNamespace, podName, iface.GetName()}
		for _, d := range metricDescs {
			if d.ofNetwork == nil {
				continue
			}
			if v, ok := d.ofNetwork(iface); ok {
				out.Metrics = append(out.Metrics, metric(d, labels, v))
			}
		}
	}
	return out
}

// metric is one sample, gathered live (timestamp 0, as the CRI asks).
// The CRI carries integers only: CPU seconds are whole seconds.
func metric(d metricDesc, labels []string, v uint64) *runtimeapi.Metric {
	if d.div != 0 {
		v /= d.div
	}
	return &runtimeapi.Metric{Name: d.name, MetricType: d.typ, LabelValues: labels, Value: &runtimeapi.UInt64Value{Value: v}}
}
