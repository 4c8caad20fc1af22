package labeller

import (
	"slices"
	"strconv"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/vmpod/vmpod/pkg/host"
	"github.com/vmpod/vmpod/pkg/vmspec"
)

// ownedKeys are the single labels the labeller owns under vmspec.Prefix.
// vmpod.io/ is also the prefix of pod annotations and of labels an admin
// may put on nodes for their own use (say vmpod.io/pool=gold), so the
// labeller does not own that whole prefix: only these keys. A key retired
// from Labels must stay here, or nodes keep its last value forever.
var ownedKeys = []string{
	vmspec.LabelRuntime,
	vmspec.LabelKVM,
	vmspec.LabelTCG,
	vmspec.LabelHostPassthrough,
	vmspec.LabelUEFI,
	vmspec.LabelMaxVCPUs,
	vmspec.LabelHostCPUModel,
}

// ownedPrefixes are DNS subdomains that exist only for the labeller: it
// owns every key under them.
var ownedPrefixes = []string{
	vmspec.LabelCPUModelPrefix,
	vmspec.LabelCPUFeaturePrefix,
	vmspec.LabelMachinePrefix,
}

// Owns reports whether the labeller owns the label key: it sets, changes
// and removes owned labels, and never touches any other.
func Owns(key string) bool {
	if slices.Contains(ownedKeys, key) {
		return true
	}
	for _, p := range ownedPrefixes {
		if len(key) > len(p) && key[:len(p)] == p {
			return true
		}
	}
	return false
}

// Skipped is a name from the host's capabilities that cannot be a label
// (a CPU model, feature or machine type with characters a label name or
// value cannot hold, or longer than 63 bytes). It is left out; the
// scheduler then treats the node as lacking it.
type Skipped struct {
	Key    string // the label key it would have been (or the value's key)
	Reason string
}

// Labels is the set of labels a node with host h carries. Every key is
// owned (Owns), a valid qualified name, and every value a valid label
// value; names that cannot be made into one are left out (see Desired).
func Labels(h host.Host) map[string]string {
	l, _ := Desired(h)
	return l
}

// Desired is Labels plus what it had to leave out.
//
//   - vmpod.io/runtime is "true" when QEMU can run guests here at all (an
//     accelerator is usable), "false" otherwise.
//   - vmpod.io/kvm, vmpod.io/tcg, vmpod.io/host-passthrough, vmpod.io/uefi
//     are "true" or "false".
//   - vmpod.io/max-vcpus and vmpod.io/host-cpu-model are absent when
//     libvirt does not say.
//   - cpu-model.vmpod.io/<model>, cpu-feature.vmpod.io/<feature> and
//     machine.vmpod.io/<type> are "true" for what the node has and absent
//     otherwise: never "false", so a capability that goes away removes
//     its label.
//
// The CPU features are those libvirt's host-model CPU adds on top of the
// model in vmpod.io/host-cpu-model under the node's best accelerator: what
// a guest can really be given here. The host CPU's own features are not
// used: under TCG the guest cannot have most of them (AVX-512, say).
func Desired(h host.Host) (map[string]string, []Skipped) {
	b := builder{labels: map[string]string{}}
	b.set(vmspec.LabelRuntime, boolValue(len(h.Accels) > 0))
	b.set(vmspec.LabelKVM, boolValue(h.HasAccel(host.AccelKVM)))
	b.set(vmspec.LabelTCG, boolValue(h.HasAccel(host.AccelTCG)))
	b.set(vmspec.LabelHostPassthrough, boolValue(h.HostPassthrough))
	// The converter needs both the code image and the vars template.
	b.set(vmspec.LabelUEFI, boolValue(h.Firmware.UEFICode != "" && h.Firmware.UEFIVars != ""))
	if h.MaxVCPUs > 0 {
		b.set(vmspec.LabelMaxVCPUs, strconv.Itoa(h.MaxVCPUs))
	}
	if h.HostModel.Model != "" {
		b.set(vmspec.LabelHostCPUModel, h.HostModel.Model)
	}
	for _, m := range h.CPUModels {
		b.set(vmspec.LabelCPUModelPrefix+m, "true")
	}
	for _, f := range h.HostModel.Features {
		b.set(vmspec.LabelCPUFeaturePrefix+f, "true")
	}
	for _, m := range h.Machines {
		b.set(vmspec.LabelMachinePrefix+m, "true")
	}
	return b.labels, b.skipped
}

// Annotations are the owned Node annotations for h: why KVM is not used
// here, when the KVM probe said so (vmpod.io/kvm-reason).
func Annotations(h host.Host) map[string]string {
	a := map[string]string{}
	if h.KVMReason != "" && !h.HasAccel(host.AccelKVM) {
		a[vmspec.AnnotationNodeKVMReason] = h.KVMReason
	}
	return a
}

type builder struct {
	labels  map[string]string
	skipped []Skipped
}

// set adds the label if the key and value are valid, and records it as
// skipped otherwise. Names are never rewritten: a rewritten name (sse4.1
// -> sse4_1) would be a different name to the scheduler, and two names
// could collide.
func (b *builder) set(key, value string) {
	if errs := validation.IsQualifiedName(key); len(errs) > 0 {
		b.skipped = append(b.skipped, Skipped{Key: key, Reason: errs[0]})
		return
	}
	if errs := validation.IsValidLabelValue(value); len(errs) > 0 {
		b.skipped = append(b.skipped, Skipped{Key: key, Reason: "value " + strconv.Quote(value) + ": " + errs[0]})
		return
	}
	b.labels[key] = value
}

func boolValue(b bool) string { return strconv.FormatBool(b) }
