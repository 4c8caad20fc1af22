package cri

import (
	"testing"
	"time"

	cg1 "github.com/containerd/cgroups/v3/cgroup1/stats"
	cg2 "github.com/containerd/cgroups/v3/cgroup2/stats"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestUsageOf(t *testing.T) {
	at := time.Unix(100, 0)
	v1 := &cg1.Metrics{
		CPU: &cg1.CPUStat{Usage: &cg1.CPUUsage{Total: 3e9}},
		Memory: &cg1.MemoryStat{
			Usage:             &cg1.MemoryEntry{Usage: 300 << 20, Limit: 400 << 20},
			TotalInactiveFile: 20 << 20, TotalRSS: 250 << 20, TotalPgFault: 7, TotalPgMajFault: 1,
		},
	}
	v2 := &cg2.Metrics{
		CPU:    &cg2.CPUStat{UsageUsec: 3e6},
		Memory: &cg2.MemoryStat{Usage: 300 << 20, UsageLimit: 400 << 20, InactiveFile: 20 << 20, Anon: 250 << 20, Pgfault: 7, Pgmajfault: 1},
	}
	want := usage{at: at, cpuNanos: 3e9, memUsage: 300 << 20, workingSet: 280 << 20, rss: 250 << 20, memLimit: 400 << 20, pageFaults: 7, majorPageFault: 1}
	for name, m := range map[string]any{"cgroup v1": v1, "cgroup v2": v2} {
		t.Run(name, func(t *testing.T) {
			got, err := usageOf(m, at)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got, cmp.AllowUnexported(usage{})); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
	// No limit: v1 says so with a page-rounded maximum, v2 with max.
	v1.Memory.Usage.Limit = 9223372036854771712
	v2.Memory.UsageLimit = 1<<64 - 1
	for name, m := range map[string]any{"cgroup v1 unlimited": v1, "cgroup v2 unlimited": v2} {
		got, err := usageOf(m, at)
		if err != nil || got.memLimit != 0 || got.memory().AvailableBytes != nil {
			t.Errorf("%s: limit %d, available %v, %v; want none", name, got.memLimit, got.memory().AvailableBytes, err)
		}
	}
	if _, err := usageOf("not metrics", at); err == nil {
		t.Error("usageOf of a string: no error")
	}
}

func TestUsageCPURate(t *testing.T) {
	var s cpuSampler
	first := usage{at: time.Unix(100, 0), cpuNanos: 1e9}
	if c := first.cpu(s.next(first)); c.UsageNanoCores != nil || c.UsageCoreNanoSeconds.GetValue() != 1e9 {
		t.Errorf("first sample: %v, want the total and no rate", c)
	}
	// Half a core over two seconds.
	second := usage{at: time.Unix(102, 0), cpuNanos: 2e9}
	want := &runtimeapi.CpuUsage{Timestamp: second.at.UnixNano(),
		UsageCoreNanoSeconds: &runtimeapi.UInt64Value{Value: 2e9}, UsageNanoCores: &runtimeapi.UInt64Value{Value: 5e8}}
	if diff := cmp.Diff(want, second.cpu(s.next(second)), protocmp.Transform()); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
}
