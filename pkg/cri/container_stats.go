package cri

import (
	"context"
	"sort"
	"strings"

	"github.com/containerd/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ContainerStats is the CPU and memory of the container's VM: its QEMU's
// cgroup (vm.Stats), guest RAM as QEMU touched it plus QEMU itself. A
// container that does not run has its attributes and no usage.
func (s *Server) ContainerStats(ctx context.Context, r *runtimeapi.ContainerStatsRequest) (*runtimeapi.ContainerStatsResponse, error) {
	c, err := s.container(r.GetContainerId())
	if err != nil {
		return nil, err
	}
	st, err := s.containerStats(c)
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ContainerStatsResponse{Stats: st}, nil
}

// ListContainerStats is ContainerStats of each container the filter lets
// through.
func (s *Server) ListContainerStats(ctx context.Context, r *runtimeapi.ListContainerStatsRequest) (*runtimeapi.ListContainerStatsResponse, error) {
	f := r.GetFilter()
	resp := &runtimeapi.ListContainerStatsResponse{}
	for _, c := range snapshot(&s.mu, s.containers) {
		rec := c.Get()
		switch {
		case f.GetId() != "" && !strings.HasPrefix(rec.ID, f.GetId()):
			continue
		case f.GetPodSandboxId() != "" && !strings.HasPrefix(rec.SandboxID, f.GetPodSandboxId()):
			continue
		case !matchLabels(rec.Labels, f.GetLabelSelector()):
			continue
		}
		st, err := s.containerStats(c)
		if err != nil {
			return nil, err
		}
		resp.Stats = append(resp.Stats, st)
	}
	sort.Slice(resp.Stats, func(i, j int) bool { return resp.Stats[i].Attributes.Id < resp.Stats[j].Attributes.Id })
	return resp, nil
}

func (s *Server) containerStats(c *container) (*runtimeapi.ContainerStats, error) {
	rec := c.Get()
	st := &runtimeapi.ContainerStats{Attributes: &runtimeapi.ContainerAttributes{
		Id: rec.ID, Metadata: containerMetadata(rec), Labels: rec.Labels, Annotations: rec.Annotations}}
	cpu, mem, err := s.vmUsage(c)
	switch {
	case errdefs.IsFailedPrecondition(err), errdefs.IsNotFound(err):
		return st, nil // not running: no usage
	case err != nil:
		return nil, err
	}
	st.Cpu, st.Memory = cpu, mem
	return st, nil
}
