package vmspec

// Node labels the labeller (vm-runtime labeller) keeps in step with what a
// node can run, and the scheduler plugin reads. docs/labels.md documents
// them. The labeller owns every label under these prefixes and no other.
const (
	// LabelRuntime is "true" on nodes where vmpod runs; the RuntimeClass's
	// scheduling.nodeSelector requires it.
	LabelRuntime = Prefix + "runtime"
	// LabelKVM is "true" when the node has usable KVM, "false" otherwise.
	LabelKVM = Prefix + "kvm"
	// LabelTCG is "true" when the node's QEMU can emulate (TCG).
	LabelTCG = Prefix + "tcg"
	// LabelHostPassthrough is "true" when host-passthrough CPUs are possible.
	LabelHostPassthrough = Prefix + "host-passthrough"
	// LabelUEFI is "true" when the node has OVMF.
	LabelUEFI = Prefix + "uefi"
	// LabelMaxVCPUs is the largest vCPU count a VM may have on the node.
	LabelMaxVCPUs = Prefix + "max-vcpus"
	// LabelHostCPUModel is the host-model CPU libvirt offers (e.g. EPYC).
	LabelHostCPUModel = Prefix + "host-cpu-model"
	// LabelCPUModelPrefix + model is "true" for each named CPU model usable
	// on the node (cpu-model.vmpod.io/Skylake-Client=true).
	LabelCPUModelPrefix = "cpu-model.vmpod.io/"
	// LabelCPUFeaturePrefix + feature is "true" for each host CPU feature
	// (cpu-feature.vmpod.io/avx2=true).
	LabelCPUFeaturePrefix = "cpu-feature.vmpod.io/"
	// LabelMachinePrefix + machine type is "true" for each QEMU machine
	// type the node offers (machine.vmpod.io/q35=true).
	LabelMachinePrefix = "machine.vmpod.io/"
)

// AnnotationNodeKVMReason is the Node annotation in which the labeller
// says why vmpod.io/kvm is "false" on a node whose /dev/kvm exists, or
// that has none: the KVM probe's verdict (pkg/node). Absent when KVM works.
const AnnotationNodeKVMReason = Prefix + "kvm-reason"

// LabelPrefixes are the label prefixes the labeller owns.
var LabelPrefixes = []string{Prefix, LabelCPUModelPrefix, LabelCPUFeaturePrefix, LabelMachinePrefix}
