package scheduler

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vmpod/vmpod/pkg/vmspec"
)

// nodeWrapper builds Node objects as a kubelet and the vmpod labeller
// leave them: allocatable resources, status.images, capability labels.
type nodeWrapper struct{ v1.Node }

// node is a Ready node without vmpod: 16 CPUs, memory allocatable.
func node(name, memory string) *nodeWrapper {
	alloc := v1.ResourceList{
		v1.ResourceCPU:    resource.MustParse("16"),
		v1.ResourceMemory: resource.MustParse(memory),
		v1.ResourcePods:   resource.MustParse("110"),
	}
	return &nodeWrapper{v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{v1.LabelHostname: name}},
		Status: v1.NodeStatus{
			Capacity:    alloc,
			Allocatable: alloc,
			Conditions:  []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}},
		},
	}}
}

// vmNode is a TCG-only vmpod node with QEMU's q35 machine types and up to
// 16 vCPUs, as the labeller labels it.
func vmNode(name, memory string) *nodeWrapper {
	return node(name, memory).
		Label(vmspec.LabelRuntime, "true").
		Label(vmspec.LabelKVM, "false").
		Label(vmspec.LabelTCG, "true").
		Label(vmspec.LabelHostPassthrough, "false").
		Label(vmspec.LabelUEFI, "false").
		Label(vmspec.LabelMaxVCPUs, "16").
		Label(vmspec.LabelHostCPUModel, "qemu64").
		Label(vmspec.LabelMachinePrefix+"q35", "true").
		Label(vmspec.LabelMachinePrefix+"pc-q35-7.2", "true")
}

// KVM adds KVM and host-passthrough.
func (n *nodeWrapper) KVM() *nodeWrapper {
	return n.Label(vmspec.LabelKVM, "true").Label(vmspec.LabelHostPassthrough, "true")
}

func (n *nodeWrapper) CPUModels(models ...string) *nodeWrapper {
	for _, m := range models {
		n.Label(vmspec.LabelCPUModelPrefix+m, "true")
	}
	return n
}

func (n *nodeWrapper) Features(features ...string) *nodeWrapper {
	for _, f := range features {
		n.Label(vmspec.LabelCPUFeaturePrefix+f, "true")
	}
	return n
}

// CPU sets the node's allocatable (and capacity) CPU.
func (n *nodeWrapper) CPU(q string) *nodeWrapper {
	n.Status.Allocatable[v1.ResourceCPU] = resource.MustParse(q)
	n.Status.Capacity[v1.ResourceCPU] = resource.MustParse(q)
	return n
}

func (n *nodeWrapper) UEFI() *nodeWrapper { return n.Label(vmspec.LabelUEFI, "true") }

func (n *nodeWrapper) Label(k, v string) *nodeWrapper { n.Labels[k] = v; return n }

func (n *nodeWrapper) Image(name string, size int64) *nodeWrapper {
	n.Status.Images = append(n.Status.Images, v1.ContainerImage{Names: []string{name}, SizeBytes: size})
	return n
}

func (n *nodeWrapper) Obj() *v1.Node { return &n.Node }
