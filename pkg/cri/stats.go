package cri

import (
	"fmt"
	"sync"
	"time"

	cg1 "github.com/containerd/cgroups/v3/cgroup1/stats"
	cg2 "github.com/containerd/cgroups/v3/cgroup2/stats"
	"github.com/containerd/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// usage is what the CRI reports of a VM's cgroup (vm.Stats), read from
// containerd's cgroup v1 or v2 metrics as containerd's CRI plugin reads
// them: the working set is the usage less inactive file pages (what the
// kubelet evicts on), RSS the anonymous memory.
type usage struct {
	at                         time.Time
	cpuNanos                   uint64
	memUsage, workingSet, rss  uint64
	memLimit                   uint64 // 0: none
	pageFaults, majorPageFault uint64
}

// usageOf reads m, a *cgroup1/stats.Metrics or *cgroup2/stats.Metrics.
func usageOf(m any, at time.Time) (usage, error) {
	u := usage{at: at}
	switch m := m.(type) {
	case *cg1.Metrics:
		if c := m.GetCPU().GetUsage(); c != nil {
			u.cpuNanos = c.GetTotal()
		}
		if mem := m.GetMemory(); mem != nil {
			u.memUsage = mem.GetUsage().GetUsage()
			u.workingSet = sub(u.memUsage, mem.GetTotalInactiveFile())
			u.rss = mem.GetTotalRSS()
			u.pageFaults, u.majorPageFault = mem.GetTotalPgFault(), mem.GetTotalPgMajFault()
			if l := mem.GetUsage().GetLimit(); l < 1<<62 { // v1 says "none" as a page-rounded max
				u.memLimit = l
			}
		}
	case *cg2.Metrics:
		if c := m.GetCPU(); c != nil {
			u.cpuNanos = c.GetUsageUsec() * 1000
		}
		if mem := m.GetMemory(); mem != nil {
			u.memUsage = mem.GetUsage()
			u.workingSet = sub(u.memUsage, mem.GetInactiveFile())
			u.rss = mem.GetAnon()
			u.pageFaults, u.majorPageFault = mem.GetPgfault(), mem.GetPgmajfault()
			if l := mem.GetUsageLimit(); l < 1<<62 {
				u.memLimit = l
			}
		}
	default:
		return usage{}, errorf(errdefs.ErrInternal, "cgroup metrics of type %T", m)
	}
	return u, nil
}

func sub(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}

// cpu is the CRI's CPU usage; the rate (nano cores) is over the time
// since prev, the last sample taken (none: no rate).
func (u usage) cpu(prev usage) *runtimeapi.CpuUsage {
	c := &runtimeapi.CpuUsage{Timestamp: u.at.UnixNano(), UsageCoreNanoSeconds: &runtimeapi.UInt64Value{Value: u.cpuNanos}}
	if dt := u.at.Sub(prev.at); !prev.at.IsZero() && dt > 0 && u.cpuNanos >= prev.cpuNanos {
		c.UsageNanoCores = &runtimeapi.UInt64Value{Value: uint64(float64(u.cpuNanos-prev.cpuNanos) / dt.Seconds())}
	}
	return c
}

func (u usage) memory() *runtimeapi.MemoryUsage {
	m := &runtimeapi.MemoryUsage{
		Timestamp:       u.at.UnixNano(),
		WorkingSetBytes: &runtimeapi.UInt64Value{Value: u.workingSet},
		UsageBytes:      &runtimeapi.UInt64Value{Value: u.memUsage},
		RssBytes:        &runtimeapi.UInt64Value{Value: u.rss},
		PageFaults:      &runtimeapi.UInt64Value{Value: u.pageFaults},
		MajorPageFaults: &runtimeapi.UInt64Value{Value: u.majorPageFault},
	}
	if u.memLimit > 0 {
		m.AvailableBytes = &runtimeapi.UInt64Value{Value: sub(u.memLimit, u.workingSet)}
	}
	return m
}

// cpuSampler keeps a container's last CPU sample, for the rate.
type cpuSampler struct {
	mu   sync.Mutex
	last usage
}

// next returns the sample before u and keeps u.
func (s *cpuSampler) next(u usage) usage {
	s.mu.Lock()
	defer s.mu.Unlock()
	prev := s.last
	if u.at.After(prev.at) {
		s.last = u
	}
	return prev
}

// vmUsage samples the cgroup of c's VM; FailedPrecondition when it does
// not run.
func (s *Server) vmUsage(c *container) (*runtimeapi.CpuUsage, *runtimeapi.MemoryUsage, error) {
	m, at, err := s.vms.Stats(c.id)
	if err != nil {
		return nil, nil, fmt.Errorf("container %s: %w", c.id, err)
	}
	u, err := usageOf(m, at)
	if err != nil {
		return nil, nil, err
	}
	return u.cpu(c.cpu.next(u)), u.memory(), nil
}
