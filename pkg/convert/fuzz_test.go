package convert_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"libvirt.org/go/libvirtxml"

	"github.com/vmpod/vmpod/internal/testenv/hostcaps"
	"github.com/vmpod/vmpod/pkg/convert"
	"github.com/vmpod/vmpod/pkg/host"
	"github.com/vmpod/vmpod/pkg/vmspec"
	. "github.com/vmpod/vmpod/pkg/vmspec/vmspectest"
)

// FuzzDomain runs whatever annotations and limits a user may write through
// FromPod and Domain on a TCG and a KVM node: the result is a domain that
// marshals, or a classified error; never a panic. A KVM guest's CPU has
// vmx and svm disabled unless the pod asked for nesting.
func FuzzDomain(f *testing.F) {
	for _, a := range vmspec.Annotations {
		f.Add(a.Key, a.Example, "1", "256Mi", false)
	}
	f.Add(vmspec.AnnotationAccel, "kvm", "2", "1Gi", true)
	f.Add(vmspec.AnnotationCPUModel, "host-model", "300m", "64Mi", false)
	f.Add(vmspec.AnnotationBoot, "disk", "16", "2Gi", true)
	f.Add(vmspec.AnnotationNestedVirt, "on", "2", "1Gi", true)
	f.Add(vmspec.AnnotationCPUModel, "EPYC", "1", "1Gi", true)
	f.Fuzz(func(t *testing.T, key, value, cpu, mem string, kvm bool) {
		s, h, ok := fuzzedSpec(t, MakePod("fuzz"), key, value, cpu, mem, kvm)
		if !ok {
			return
		}
		d, err := convert.Domain(s, h, paths())
		if err != nil {
			if !errdefs.IsFailedPrecondition(err) {
				t.Fatalf("Domain error is not FailedPrecondition: %v", err)
			}
			return
		}
		if _, err := d.Marshal(); err != nil {
			t.Fatalf("Marshal: %v", err)
		}
		if d.Name != s.Name || bootVCPUs(d, s.VCPUs) != s.VCPUs || d.VCPU.Value != uint(s.CeilingVCPUs()) ||
			uint64(d.Memory.Value)<<10 != s.MemoryBytes {
			t.Fatalf("domain lost the pod's name, vCPUs or memory: %+v vs %+v", d, s)
		}
		if m := d.MaximumMemory; (m != nil) != (s.HotplugMemoryBytes() > 0) ||
			m != nil && uint64(m.Value)<<10 != s.CeilingMemoryBytes() {
			t.Fatalf("domain's maxMemory %+v does not match the pod's maximum %d", m, s.CeilingMemoryBytes())
		}
		if d.Type == "kvm" && !s.CPU.Nested && !nestingDisabled(d.CPU) {
			t.Fatalf("a KVM guest's CPU offers nesting the pod did not ask for: %+v", d.CPU)
		}
		// The node's default room never turns a VM it runs into one it
		// refuses, nor changes the vCPUs its guest boots with.
		if n := convert.DefaultMaxVCPUs(s, h, paths(), 4); n > 0 {
			s.MaxVCPUs = n
			d, err := convert.Domain(s, h, paths())
			if err != nil {
				t.Fatalf("with the default room of %d vCPUs, Domain refuses a VM it ran without: %v", n, err)
			}
			if bootVCPUs(d, s.VCPUs) != s.VCPUs || d.VCPU.Value != uint(n) {
				t.Fatalf("with the default room of %d vCPUs the domain boots %d of %d, want %d", n, bootVCPUs(d, s.VCPUs), d.VCPU.Value, s.VCPUs)
			}
		}
	})
}

// bootVCPUs is how many vCPUs d's guest boots with: those plugged under
// KVM, those the kernel command line brings up (maxcpus) under TCG,
// where all are plugged.
func bootVCPUs(d *libvirtxml.Domain, vcpus int) int {
	switch {
	case d.VCPU.Current != 0:
		return int(d.VCPU.Current)
	case d.OS != nil && strings.Contains(d.OS.Cmdline+" ", fmt.Sprintf(" maxcpus=%d ", vcpus)):
		return vcpus
	}
	return int(d.VCPU.Value)
}

// nestingDisabled reports whether c disables both vmx and svm.
func nestingDisabled(c *libvirtxml.DomainCPU) bool {
	off := 0
	for _, f := range c.Features {
		if f.Policy == "disable" && (f.Name == "vmx" || f.Name == "svm") {
			off++
		}
	}
	return off == 2
}

// fuzzedSpec is FuzzDomain's generator: pod with one fuzzed annotation and
// fuzzed cpu and memory limits, through FromPod, and the node it runs on
// (TCG, or KVM when kvm is set). ok is false for a pod the apiserver or
// FromPod refuses (FuzzAnnotations and FuzzFrontDoorsAgree cover those).
func fuzzedSpec(t *testing.T, pod *PodWrapper, key, value, cpu, mem string, kvm bool) (vmspec.Spec, host.Host, bool) {
	pod.Annotation(key, value)
	if !setQuantity(pod.CPU, cpu) || !setQuantity(pod.Memory, mem) {
		return vmspec.Spec{}, host.Host{}, false
	}
	s, err := vmspec.FromPod(pod.Obj())
	if err != nil {
		return vmspec.Spec{}, host.Host{}, false
	}
	h := hostcaps.Golden[host.Host](t, hostcaps.TCG)
	if kvm {
		h = hostcaps.Golden[host.Host](t, hostcaps.KVM)
	}
	return s, h, true
}

// setQuantity applies a fuzzed quantity, or reports that it does not parse
// (the API server would have refused the pod).
func setQuantity(set func(string) *PodWrapper, q string) (ok bool) {
	if hugeExponent(q) {
		return false
	}
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	set(q)
	return true
}

// hugeExponent reports a quantity whose exponent (1e-5000, 7E7070707011)
// the API machinery's own parser (resource.ParseQuantity, upstream) takes
// minutes to parse: the API server pays that before vmpod sees the pod,
// so it is not this target's to explore. Exponents vmpod's code must
// survive (1e95555594, which parses at once) stay in.
func hugeExponent(q string) bool {
	i := strings.LastIndexAny(q, "eE")
	if i < 0 {
		return false
	}
	exp := strings.TrimPrefix(strings.TrimPrefix(q[i+1:], "+"), "-")
	negative := strings.HasPrefix(q[i+1:], "-")
	return (negative && len(exp) > 3) || len(exp) > 9
}
