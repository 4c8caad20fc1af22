package vmplacement

import (
	"context"
	"strconv"
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
	node := nodeInfo.Node()
	if node == nil {
		return fwk.NewStatus(fwk.Error, "node not found")
	}
	kvm, reason := n.fitsLabels(node.Labels)
	if reason != "" {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, reason)
	}
	free := nodeInfo.GetAllocatable().GetMemory() - pl.usedMemory(nodeInfo)
	if n.footprint(kvm) > free {
		return fwk.NewStatus(fwk.Unschedulable, ErrReasonMemory)
	}
	return nil
}

// fitsLabels checks the VM against a node's labels. It returns whether the
// VM would run under KVM there, or the reason it cannot run there at all.
// It follows what pkg/convert does with the same facts from pkg/host, so
// that a pod the scheduler places is a pod the node's runtime accepts.
func (n *needs) fitsLabels(labels map[string]string) (kvm bool, reason string) {
	is := func(key string) bool { return labels[key] == "true" }
	if !is(vmspec.LabelRuntime) {
		return false, ErrReasonNoRuntime
	}

	switch n.Accel {
	case vmspec.AccelKVM:
		if !is(vmspec.LabelKVM) {
			return false, ErrReasonNoKVM
		}
		kvm = true
	case vmspec.AccelTCG:
		if !is(vmspec.LabelTCG) {
			return false, ErrReasonNoTCG
		}
	default: // auto
		kvm = is(vmspec.LabelKVM)
		if !kvm && !is(vmspec.LabelTCG) {
			return false, ErrReasonNoAccel
		}
	}

	switch n.CPUModel {
	case vmspec.CPUModelAuto:
		// host-passthrough under KVM, QEMU's default model under TCG.
		if kvm && !is(vmspec.LabelHostPassthrough) {
			return kvm, ErrReasonHostPassthrough
		}
	case vmspec.CPUModelHostPassthrough:
		if !kvm || !is(vmspec.LabelHostPassthrough) {
			return kvm, ErrReasonHostPassthrough
		}
	case vmspec.CPUModelHostModel:
		if labels[vmspec.LabelHostCPUModel] == "" {
			return kvm, ErrReasonHostModel
		}
	default:
		if !is(vmspec.LabelCPUModelPrefix + n.CPUModel) {
			return kvm, ErrReasonCPUModelPrefix + n.CPUModel
		}
	}
	var missing []string
	for _, f := range n.CPUFeatures {
		if !is(vmspec.LabelCPUFeaturePrefix + f) {
			missing = append(missing, f)
		}
	}
	if len(missing) > 0 {
		return kvm, ErrReasonCPUFeaturesPrefix + strings.Join(missing, ",")
	}

	if n.UEFI && !is(vmspec.LabelUEFI) {
		return kvm, ErrReasonNoUEFI
	}
	if !is(vmspec.LabelMachinePrefix + n.Machine) {
		return kvm, ErrReasonMachinePrefix + n.Machine
	}
	// An absent or malformed limit is not enforced: the labeller leaves
	// it out when libvirt does not say, and vmspec caps vCPUs anyway.
	if maxVCPUs, err := strconv.Atoi(labels[vmspec.LabelMaxVCPUs]); err == nil && maxVCPUs > 0 && n.VCPUs > maxVCPUs {
		return kvm, ErrReasonTooManyVCPUs
	}
	return kvm, ""
}

// runsUnderKVM reports whether a VM with that accelerator policy runs
// under KVM on the node (the node's runtime resolves auto the same way).
func runsUnderKVM(accel vmspec.Accel, node *v1.Node) bool {
	switch accel {
	case vmspec.AccelKVM:
		return true
	case vmspec.AccelTCG:
		return false
	default:
		return node.Labels[vmspec.LabelKVM] == "true"
	}
}
