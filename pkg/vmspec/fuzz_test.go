package vmspec_test

import (
	"strings"
	"testing"

	"github.com/containerd/errdefs"

	"github.com/vmpod/vmpod/pkg/vmspec"
	. "github.com/vmpod/vmpod/pkg/vmspec/vmspectest"
)

// FuzzAnnotations feeds arbitrary annotations through FromPod. Whatever a
// user writes, the result is either a valid Spec that names no host path,
// or an InvalidArgument error; never a panic.
func FuzzAnnotations(f *testing.F) {
	for _, a := range vmspec.Annotations {
		f.Add(a.Key, a.Example, "", "")
		f.Add(a.Key, a.Default, vmspec.AnnotationAccel, "tcg")
	}
	f.Add(vmspec.AnnotationCPUModel, "host-passthrough", vmspec.AnnotationAccel, "tcg")
	f.Add(vmspec.AnnotationBoot, "disk", vmspec.AnnotationKernelCmdline, "quiet")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		pod := MakePod("fuzz").Annotation(k1, v1).Annotation(k2, v2).Obj()
		s, err := vmspec.FromPod(pod)
		if err != nil {
			if !errdefs.IsInvalidArgument(err) {
				t.Fatalf("error is not InvalidArgument: %v", err)
			}
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("FromPod accepted a spec that Validate refuses: %v", err)
		}
		for _, v := range []string{s.CPU.Model, s.Machine} {
			if strings.ContainsAny(v, "/\\ \n") {
				t.Fatalf("accepted %q, which could name a path", v)
			}
		}
		if strings.ContainsAny(s.Boot.Cmdline, "\n\r\x00") {
			t.Fatalf("accepted a multi-line kernel command line %q", s.Boot.Cmdline)
		}
	})
}
