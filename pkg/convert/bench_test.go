package convert_test

import (
	"testing"

	"github.com/vmpod/vmpod/internal/testenv/hostcaps"
	"github.com/vmpod/vmpod/pkg/convert"
	"github.com/vmpod/vmpod/pkg/host"
	"github.com/vmpod/vmpod/pkg/vmspec"
	. "github.com/vmpod/vmpod/pkg/vmspec/vmspectest"
)

// BenchmarkDomain is one conversion of a typical VM pod, from Spec to XML.
func BenchmarkDomain(b *testing.B) {
	s, err := vmspec.FromPod(MakePod("bench").CPU("2").Memory("1Gi").
		BlockVolume("data", "c", "/dev/data").Annotation(vmspec.AnnotationSSHAuthorizedKeys, "ssh-ed25519 AAAA k").Obj())
	if err != nil {
		b.Fatal(err)
	}
	h := hostcaps.Golden[host.Host](b, hostcaps.TCG)
	p := paths()
	b.ReportAllocs()
	for b.Loop() {
		d, err := convert.Domain(s, h, p)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := d.Marshal(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFromPodAndDomain adds building the Spec from the pod.
func BenchmarkFromPodAndDomain(b *testing.B) {
	pod := MakePod("bench").CPU("2").Memory("1Gi").Obj()
	h := hostcaps.Golden[host.Host](b, hostcaps.TCG)
	p := paths()
	b.ReportAllocs()
	for b.Loop() {
		s, err := vmspec.FromPod(pod)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := convert.Domain(s, h, p); err != nil {
			b.Fatal(err)
		}
	}
}
