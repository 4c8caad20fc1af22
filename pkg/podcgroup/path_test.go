package podcgroup

import (
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/google/go-cmp/cmp"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in   string
		want Path
		pod  string
		err  string
	}{
		{
			in:   "/kubepods/burstable/pod1234/abcd",
			want: Path{Raw: "/kubepods/burstable/pod1234/abcd", Driver: Cgroupfs, Dir: "/kubepods/burstable/pod1234/abcd"},
			pod:  "/kubepods/burstable/pod1234",
		},
		{
			in: "kubepods-besteffort-pod1234.slice:cri-containerd:abcd",
			want: Path{Raw: "kubepods-besteffort-pod1234.slice:cri-containerd:abcd", Driver: Systemd,
				Dir:   "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1234.slice/cri-containerd-abcd.scope",
				Slice: "kubepods-besteffort-pod1234.slice", Unit: "cri-containerd-abcd.scope"},
			pod: "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1234.slice",
		},
		{
			// kind's cgroupRoot /kubelet becomes kubelet.slice
			in: "kubelet-kubepods-pod9.slice:cri-containerd:ef",
			want: Path{Raw: "kubelet-kubepods-pod9.slice:cri-containerd:ef", Driver: Systemd,
				Dir:   "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-pod9.slice/cri-containerd-ef.scope",
				Slice: "kubelet-kubepods-pod9.slice", Unit: "cri-containerd-ef.scope"},
			pod: "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-pod9.slice",
		},
		{
			in:   ":vmpod:x",
			want: Path{Raw: ":vmpod:x", Driver: Systemd, Dir: "/system.slice/vmpod-x.scope", Slice: "system.slice", Unit: "vmpod-x.scope"},
			pod:  "/system.slice",
		},
		{in: "", err: "empty"},
		{in: "relative/path", err: "neither an absolute path"},
		{in: "/a/../b", err: "not a clean path"},
		{in: "/", err: "not a clean path"},
		{in: "kubepods.slice:a", err: "neither an absolute path"},
		{in: "kubepods:cri:x", err: `slice "kubepods" is not a systemd slice name`},
		{in: "a--b.slice:cri:x", err: "empty component"},
		{in: "a.slice:cri:", err: "unit name must be non-empty"},
		{in: "a.slice:cri:x/y", err: "contain no /"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := Parse(tt.in)
			if tt.err != "" {
				if err == nil || !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("Parse(%q) = %+v, %v; want InvalidArgument containing %q", tt.in, got, err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Parse (-want +got):\n%s", diff)
			}
			if got.PodDir() != tt.pod {
				t.Errorf("PodDir = %q, want %q", got.PodDir(), tt.pod)
			}
		})
	}
}

func TestExpandSlice(t *testing.T) {
	for in, want := range map[string]string{
		"-.slice":            "/",
		"a.slice":            "/a.slice",
		"a-b.slice":          "/a.slice/a-b.slice",
		"kubepods-a-b.slice": "/kubepods.slice/kubepods-a.slice/kubepods-a-b.slice",
	} {
		if got, err := ExpandSlice(in); err != nil || got != want {
			t.Errorf("ExpandSlice(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"a", ".slice", "-a.slice", "a/b.slice"} {
		if got, err := ExpandSlice(in); err == nil {
			t.Errorf("ExpandSlice(%q) = %q, want an error", in, got)
		}
	}
}

func TestSibling(t *testing.T) {
	for _, tc := range []struct{ raw, wantRaw, wantDir string }{
		{"/kubepods/burstable/pod1234/abcd", "/kubepods/burstable/pod1234/abcd-fs", "/kubepods/burstable/pod1234/abcd-fs"},
		{"kubepods-burstable-pod1234.slice:cri-containerd:abcd", "kubepods-burstable-pod1234.slice:cri-containerd:abcd-fs",
			"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234.slice/cri-containerd-abcd-fs.scope"},
		{"kubepods-pod1234.slice::abcd", "kubepods-pod1234.slice::abcd-fs", "/kubepods.slice/kubepods-pod1234.slice/abcd-fs.scope"},
	} {
		p, err := Parse(tc.raw)
		if err != nil {
			t.Fatal(err)
		}
		s := p.Sibling("fs")
		if s.Raw != tc.wantRaw || s.Dir != tc.wantDir || s.Driver != p.Driver {
			t.Errorf("%s: Sibling(fs) = %+v, want raw %s, dir %s", tc.raw, s, tc.wantRaw, tc.wantDir)
		}
		if s.PodDir() != p.PodDir() {
			t.Errorf("%s: sibling's pod dir %s, want %s", tc.raw, s.PodDir(), p.PodDir())
		}
	}
}
