package vmplacement

import (
	"context"
	"strings"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/vmpod/vmpod/pkg/vmspec"
)

// Filter reasons. An unschedulable pod's FailedScheduling event lists them
// ("0/5 nodes are available: 2 node has no KVM; ..."); tests compare them.
// A reason ending in a space is a prefix: the detail (a model, a list of
// features, a machine type) follows.
const (
	ErrReasonNoRuntime = "node does not run vmpod"
	ErrReasonNoKVM     = "node has no KVM; pod requires vmpod.io/accel=kvm"
	ErrReasonNoTCG     = "node cannot emulate (no TCG); pod requires vmpod.io/accel=tcg"
	ErrReasonNoAccel   = "node has neither KVM nor TCG"
	// ErrReasonHostPassthrough: vmpod.io/cpu-model=host-passthrough, or
	// auto on a node where the VM would run under KVM (auto means
	// host-passthrough there), and the node has no KVM or does not allow
	// host-passthrough.
	ErrReasonHostPassthrough   = "node cannot give a host-passthrough CPU (needs KVM and vmpod.io/host-passthrough=true)"
	ErrReasonHostModel         = "node offers no host-model CPU; pod requires vmpod.io/cpu-model=host-model"
	ErrReasonCPUModelPrefix    = "node lacks CPU model "
	ErrReasonCPUFeaturesPrefix = "node lacks CPU features "
	ErrReasonNoUEFI            = "node has no UEFI firmware; pod requires vmpod.io/firmware=uefi"
	ErrReasonMachinePrefix     = "node lacks machine type "
	ErrReasonTooManyVCPUs      = "node allows fewer vCPUs than the VM has (vmpod.io/max-vcpus)"
	// ErrReasonMemory: the node's allocatable memory cannot hold the pods
	// already there and this VM, each VM counted with its guest RAM and
	// overhead (docs/scheduler.md).
	ErrReasonMemory = "node has too little memory for the VM and its overhead"
)

// Filter checks that the node can run the VM: the vmpod runtime, the
// accelerator, CPU model and features, firmware, machine type, vCPU count
// (all from the labeller's node labels), then memory.
func (pl *VMPlacement) Filter(_ context.Context, cs fwk.CycleState, pod *v1.Pod, nodeInfo fwk.NodeInfo) *fwk.Status {
	n, st := pl.stateOrNeeds(cs, pod)
	if !st.IsSuccess() {
		return st
	}
	if n == nil {
		return nil
	}
	if nodeInfo.Node() == nil {
		return fwk.NewStatus(fwk.Error, "node not found")
	}
	if n.filterSkipped {
		// PreFilter named the nodes of the classes that can run the VM,
		// and NodeResourcesFit checks memory as this Filter would
		// (skip.go); Reserve checks the chosen node.
		return nil
	}
	s := pl.nodeState(nodeInfo)
	kvm, reason := n.fitsClass(s.class)
	if reason != "" {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, reason)
	}
	if !n.fitsMemory(nodeInfo, s, kvm) {
		return fwk.NewStatus(fwk.Unschedulable, ErrReasonMemory)
	}
	return nil
}

// fits checks the VM against what a node can run. It returns whether the
// VM would run under KVM there, or the reason it cannot run there at all.
// It follows what pkg/convert does with the same facts from pkg/host, so
// that a pod the scheduler places is a pod the node's runtime accepts.
func (n *needs) fits(c *caps) (kvm bool, reason string) {
	if !c.runtime {
		return false, ErrReasonNoRuntime
	}

	switch n.Accel {
	case vmspec.AccelKVM:
		if !c.kvm {
			return false, ErrReasonNoKVM
		}
	case vmspec.AccelTCG:
		if !c.tcg {
			return false, ErrReasonNoTCG
		}
	default: // auto
		if !c.kvm && !c.tcg {
			return false, ErrReasonNoAccel
		}
	}
	kvm = c.runsUnderKVM(n.Accel)

	switch n.CPUModel {
	case vmspec.CPUModelAuto:
		// host-passthrough under KVM, QEMU's default model under TCG.
		if kvm && !c.hostPassthrough {
			return kvm, ErrReasonHostPassthrough
		}
	case vmspec.CPUModelHostPassthrough:
		if !kvm || !c.hostPassthrough {
			return kvm, ErrReasonHostPassthrough
		}
	case vmspec.CPUModelHostModel:
		if !c.hostModel {
			return kvm, ErrReasonHostModel
		}
	default:
		if !c.has(n.keys.cpuModel) {
			return kvm, ErrReasonCPUModelPrefix + n.CPUModel
		}
	}
	var missing []string
	for i, key := range n.keys.cpuFeatures {
		if !c.has(key) {
			missing = append(missing, n.CPUFeatures[i])
		}
	}
	if len(missing) > 0 {
		return kvm, ErrReasonCPUFeaturesPrefix + strings.Join(missing, ",")
	}

	if n.UEFI && !c.uefi {
		return kvm, ErrReasonNoUEFI
	}
	if !c.has(n.keys.machine) {
		return kvm, ErrReasonMachinePrefix + n.Machine
	}
	if c.maxVCPUs > 0 && n.VCPUs > c.maxVCPUs {
		return kvm, ErrReasonTooManyVCPUs
	}
	return kvm, ""
}
