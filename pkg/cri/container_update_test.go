package cri

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestLinuxResources(t *testing.T) {
	p := func(v int64) *int64 { return &v }
	u := func(v uint64) *uint64 { return &v }
	for name, tc := range map[string]struct {
		in   *runtimeapi.LinuxContainerResources
		want *specs.LinuxResources
	}{
		"none":       {nil, nil},
		"quota only": {&runtimeapi.LinuxContainerResources{CpuQuota: 50000}, &specs.LinuxResources{CPU: &specs.LinuxCPU{Quota: p(50000)}}},
		"unlimited":  {&runtimeapi.LinuxContainerResources{CpuQuota: -1}, &specs.LinuxResources{CPU: &specs.LinuxCPU{Quota: p(-1)}}},
		"all": {&runtimeapi.LinuxContainerResources{CpuPeriod: 100000, CpuQuota: 200000, CpuShares: 2048, MemoryLimitInBytes: 256 << 20},
			&specs.LinuxResources{CPU: &specs.LinuxCPU{Period: u(100000), Quota: p(200000), Shares: u(2048)}, Memory: &specs.LinuxMemory{Limit: p(256 << 20)}}},
		"memory only": {&runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 1 << 30}, &specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: p(1 << 30)}}},
	} {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, linuxResources(tc.in)); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}
