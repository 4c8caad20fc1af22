package vmplacement

import (
	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/vmpod/vmpod/pkg/vmspec"
)

// Memory, as this plugin counts it (docs/scheduler.md):
//
//	counted(p)   = p's memory requests + p.spec.overhead   (what NodeResourcesFit counts)
//	footprint(p) = guest RAM + vmspec overhead(guest RAM, vCPUs, accelerator)
//	               + vmspec shares' overhead(guest RAM, shares)         (its file servers, shared guest RAM)
//	extra(p)     = max(0, footprint(p) - counted(p))        for a VM pod, 0 for any other pod
//
// and a VM pod fits a node when
//
//	allocatable - Σ counted(pods on node) - Σ extra(pods on node) >= max(counted(pod), footprint(pod)).
//
// Guest RAM is limits.memory, or what the pod's status says the VM has
// when that is more (a resize not yet applied); vCPUs are the most the VM
// may have (vmSize). NodeResourcesFit still checks requests alone; this is
// the stricter check on top, never a second count of the same bytes.

// vmFootprint is guest RAM plus vmspec's overhead model, the VM's shares'
// part included (Overhead.PodBytes): what its pod cgroup holds.
func vmFootprint(guestBytes int64, vcpus, shares int, kvm bool) int64 {
	return addSat(guestBytes, int64Sat(vmspec.OverheadFor(kvm).PodBytes(uint64(max(guestBytes, 0)), vcpus, shares)))
}

// usedMemory is the memory the node's pods take: NodeResourcesFit's count
// (NodeInfo.GetRequested, which includes pod overhead) plus each VM pod's
// extra. It saturates (saturate.go).
func usedMemory(ni fwk.NodeInfo, s *nodeState) int64 {
	return addSat(requestedSat(ni.GetRequested().GetMemory()), s.extraBytes)
}

// podExtra is the memory a pod on the node takes beyond NodeResourcesFit's
// count of it: 0 unless it is a valid VM pod (the runtime refuses an
// invalid one, so it never starts a VM).
func (pl *VMPlacement) podExtra(pi fwk.PodInfo, c *caps) int64 {
	pod := pi.GetPod()
	if !pl.isVMPod(pod) {
		return 0
	}
	spec, err := vmspec.FromPod(pod)
	if err != nil {
		return 0
	}
	guest, vcpus := vmSize(pod, spec)
	fp := vmFootprint(guest, vcpus, len(spec.Shares), c.runsUnderKVM(spec.Accel))
	return max(0, subSat(fp, countedMemory(pi)))
}

// vmSize is the size a VM pod is counted at: the guest RAM of the larger
// of what its spec asks for and what its status says the VM has (an
// in-place resize the kubelet has not applied yet, either way: a
// shrink the guest has not given back must still be counted), and the
// most vCPUs it may have (vmpod.io/max-vcpus), whose threads QEMU may
// hold; as pkg/vm sets QEMU's memory limit.
func vmSize(pod *v1.Pod, spec vmspec.Spec) (guestBytes int64, vcpus int) {
	guestBytes = int64(spec.MemoryBytes)
	if cs := pod.Status.ContainerStatuses; len(cs) > 0 && cs[0].Resources != nil {
		if q, ok := cs[0].Resources.Limits[v1.ResourceMemory]; ok {
			if b, ok := q.AsInt64(); ok && b > 0 {
				guestBytes = max(guestBytes, b&^(1<<20-1))
			}
		}
	}
	return guestBytes, spec.CeilingVCPUs()
}
