package cri

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestMetricsOf: a VM pod's stats become cAdvisor's series: the running
// container's CPU (whole seconds) and memory under its labels, the pod
// interface's counters under the sandbox's ("POD"); a container that does
// not run has none. Every metric has a descriptor with as many label keys
// as it has values.
func TestMetricsOf(t *testing.T) {
	u := func(v uint64) *runtimeapi.UInt64Value { return &runtimeapi.UInt64Value{Value: v} }
	st := &runtimeapi.PodSandboxStats{
		Attributes: &runtimeapi.PodSandboxAttributes{Id: "sb1", Metadata: &runtimeapi.PodSandboxMetadata{Name: "web", Namespace: "default"}},
		Linux: &runtimeapi.LinuxPodSandboxStats{
			Containers: []*runtimeapi.ContainerStats{
				{
					Attributes: &runtimeapi.ContainerAttributes{Id: "c1", Metadata: &runtimeapi.ContainerMetadata{Name: "vm"}},
					Cpu:        &runtimeapi.CpuUsage{Timestamp: 5, UsageCoreNanoSeconds: u(2_500_000_000)},
					Memory:     &runtimeapi.MemoryUsage{Timestamp: 5, UsageBytes: u(300), WorkingSetBytes: u(200), RssBytes: u(100)},
				},
				{Attributes: &runtimeapi.ContainerAttributes{Id: "c0", Metadata: &runtimeapi.ContainerMetadata{Name: "vm"}}},
			},
			Network: &runtimeapi.NetworkUsage{Timestamp: 5, Interfaces: []*runtimeapi.NetworkInterfaceUsage{{Name: "eth0", RxBytes: u(10), TxBytes: u(20)}}},
		},
	}
	got := metricsOf(st, map[string]string{"c1": "localhost/vmpod/test-guest:v1"})
	ctr := []string{"vm", "c1", "localhost/vmpod/test-guest:v1", "c1", "default", "web"}
	net := []string{"POD", "sb1", "", "sb1", "default", "web", "eth0"}
	m := func(name string, typ runtimeapi.MetricType, labels []string, v uint64) *runtimeapi.Metric {
		return &runtimeapi.Metric{Name: name, MetricType: typ, LabelValues: labels, Value: u(v)}
	}
	want := &runtimeapi.PodSandboxMetrics{
		PodSandboxId: "sb1",
		Metrics: []*runtimeapi.Metric{
			m("container_network_receive_bytes_total", runtimeapi.MetricType_COUNTER, net, 10),
			m("container_network_transmit_bytes_total", runtimeapi.MetricType_COUNTER, net, 20),
		},
		ContainerMetrics: []*runtimeapi.ContainerMetrics{{ContainerId: "c1", Metrics: []*runtimeapi.Metric{
			m("container_cpu_usage_seconds_total", runtimeapi.MetricType_COUNTER, ctr, 2),
			m("container_memory_usage_bytes", runtimeapi.MetricType_GAUGE, ctr, 300),
			m("container_memory_working_set_bytes", runtimeapi.MetricType_GAUGE, ctr, 200),
			m("container_memory_rss", runtimeapi.MetricType_GAUGE, ctr, 100),
		}}},
	}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("metricsOf (-want +got):\n%s", diff)
	}

	descs, err := (&Server{}).ListMetricDescriptors(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]int{}
	for _, d := range descs.Descriptors {
		keys[d.Name] = len(d.LabelKeys)
	}
	all := append([]*runtimeapi.Metric{}, got.Metrics...)
	all = append(all, got.ContainerMetrics[0].Metrics...)
	for _, m := range all {
		n, ok := keys[m.Name]
		if !ok || n != len(m.LabelValues) {
			t.Errorf("metric %s: %d label values, its descriptor %v with %d keys", m.Name, len(m.LabelValues), ok, n)
		}
	}
}
