package vmspec_test

import (
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/google/go-cmp/cmp"

	"github.com/vmpod/vmpod/pkg/vmspec"
	. "github.com/vmpod/vmpod/pkg/vmspec/vmspectest"
)

// FuzzAnnotations feeds two arbitrary annotations through FromPod:
//
//   - a refusal is InvalidArgument and names one of the two keys (the pod
//     is otherwise valid, so nothing else can be at fault);
//   - an accepted enum annotation is the value the Spec holds;
//   - annotations outside vmpod.io/ change nothing;
//   - an accepted CPU model or machine type names no path, and an
//     accepted kernel command line is one line.
func FuzzAnnotations(f *testing.F) {
	for _, a := range vmspec.Annotations {
		f.Add(a.Key, a.Example, "", "")
		f.Add(a.Key, a.Default, vmspec.AnnotationAccel, "tcg")
	}
	f.Add(vmspec.AnnotationCPUModel, "host-passthrough", vmspec.AnnotationAccel, "tcg")
	f.Add(vmspec.AnnotationBoot, "disk", vmspec.AnnotationKernelCmdline, "quiet")
	f.Add(vmspec.AnnotationCPUFeatures, "vmx", vmspec.AnnotationNestedVirt, "on")
	f.Add(vmspec.AnnotationCPUFeatures, "svm,aes", vmspec.AnnotationNestedVirt, "off")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		ann := map[string]string{k1: v1, k2: v2}
		pod := MakePod("fuzz").Annotation(k1, v1).Annotation(k2, v2).Obj()
		s, err := vmspec.FromPod(pod)
		if err != nil {
			if !errdefs.IsInvalidArgument(err) {
				t.Fatalf("error is not InvalidArgument: %v", err)
			}
			if !namesKey(err.Error(), k1) && !namesKey(err.Error(), k2) {
				t.Fatalf("error names neither %q nor %q: %v", k1, k2, err)
			}
			return
		}
		for k, v := range ann {
			if got, ok := enumValue(s, k); ok && got != v {
				t.Fatalf("%s: %q accepted, but the Spec says %q", k, v, got)
			}
		}
		only := MakePod("fuzz")
		for k, v := range ann {
			if strings.HasPrefix(k, vmspec.Prefix) {
				only.Annotation(k, v)
			}
		}
		if s2, err := vmspec.FromPod(only.Obj()); err != nil || !cmp.Equal(s, s2) {
			t.Fatalf("annotations outside %s changed the Spec: %v\n%s", vmspec.Prefix, err, cmp.Diff(s, s2))
		}
		for _, v := range []string{s.CPU.Model, s.Machine} {
			if strings.ContainsAny(v, "/\\ \n") || v == "." || v == ".." {
				t.Fatalf("accepted %q, which could name a path", v)
			}
		}
		if strings.ContainsAny(s.Boot.Cmdline, "\n\r\x00") {
			t.Fatalf("accepted a multi-line kernel command line %q", s.Boot.Cmdline)
		}
	})
}

// namesKey reports whether msg names the annotation key (quoted or as the
// field before ": ").
func namesKey(msg, key string) bool {
	return key != "" && strings.Contains(msg, key)
}

// enumValue is the value the Spec holds for an enum annotation key.
func enumValue(s vmspec.Spec, key string) (string, bool) {
	switch key {
	case vmspec.AnnotationAccel:
		return string(s.Accel), true
	case vmspec.AnnotationFirmware:
		return string(s.Firmware), true
	case vmspec.AnnotationBoot:
		return string(s.Boot.Source), true
	case vmspec.AnnotationDiskBus:
		return string(s.DiskBus), true
	case vmspec.AnnotationConsole:
		return map[bool]string{true: "on", false: "off"}[s.Console], true
	case vmspec.AnnotationNestedVirt:
		return map[bool]string{true: "on", false: "off"}[s.CPU.Nested], true
	case vmspec.AnnotationMemoryHotplug:
		if s.MemoryHotplug == "" {
			return string(vmspec.MemoryHotplugVirtioMem), true
		}
		return string(s.MemoryHotplug), true
	case vmspec.AnnotationNetwork:
		return map[bool]string{true: "pod", false: "none"}[len(s.NICs) > 0], true
	}
	return "", false
}
