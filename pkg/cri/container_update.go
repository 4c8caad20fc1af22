package cri

import (
	"context"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// UpdateContainerResources resizes the running VM live (vm.VM.Update):
// CPU shares and quota, and, within the maxima the pod was created with
// (vmpod.io/max-vcpus, vmpod.io/max-memory), its vCPUs and RAM. It
// returns once the VM has the new size, which ContainerStatus then
// reports; what the VM cannot become is refused with the reason, which
// the kubelet shows in the pod's PodResizeInProgress condition.
func (s *Server) UpdateContainerResources(ctx context.Context, r *runtimeapi.UpdateContainerResourcesRequest) (*runtimeapi.UpdateContainerResourcesResponse, error) {
	c, err := s.container(r.GetContainerId())
	if err != nil {
		return nil, err
	}
	if err := s.vms.Update(ctx, c.id, linuxResources(r.GetLinux())); err != nil {
		return nil, err
	}
	if err := c.Update(func(rec *containerRecord) error {
		rec.Resources = rec.Resources.merge(r.GetLinux())
		return nil
	}); err != nil {
		return nil, err
	}
	return &runtimeapi.UpdateContainerResourcesResponse{}, nil
}

// linuxResources is the OCI form of the CRI's resources, as far as a VM
// takes them; a zero field is one the request leaves as it is.
func linuxResources(r *runtimeapi.LinuxContainerResources) *specs.LinuxResources {
	if r == nil {
		return nil
	}
	out := &specs.LinuxResources{}
	if v := r.GetMemoryLimitInBytes(); v > 0 {
		out.Memory = &specs.LinuxMemory{Limit: &v}
	}
	cpu := &specs.LinuxCPU{}
	if v := r.GetCpuPeriod(); v > 0 {
		p := uint64(v)
		cpu.Period = &p
	}
	if v := r.GetCpuQuota(); v != 0 {
		cpu.Quota = &v
	}
	if v := r.GetCpuShares(); v > 0 {
		sh := uint64(v)
		cpu.Shares = &sh
	}
	if cpu.Period != nil || cpu.Quota != nil || cpu.Shares != nil {
		out.CPU = cpu
	}
	return out
}
