package vmd

import (
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/google/go-cmp/cmp"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/vmpod/vmpod/pkg/vmspec"
)

// shareSpec is a VM container's OCI spec as containerd's CRI writes it
// for pod UID "u1" whose mounts are mounts.
func shareSpec(mounts ...specs.Mount) *specs.Spec {
	mem := int64(256 << 20)
	return &specs.Spec{
		Annotations: map[string]string{
			vmspec.CRIContainerType: vmspec.CRIContainerTypeCntr, vmspec.CRISandboxName: "web",
			vmspec.CRISandboxNamespace: "default", vmspec.CRISandboxUID: "u1",
		},
		Mounts: mounts,
		Linux: &specs.Linux{
			CgroupsPath: "/kubepods/podu1/c1",
			Resources:   &specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: &mem}},
		},
	}
}

func rbind(dst, src, mode string) specs.Mount {
	return specs.Mount{Destination: dst, Source: src, Type: "bind", Options: []string{"rbind", "rprivate", mode}}
}

// TestFromOCIShareSources: each share's host dir is the source of the
// mount the rule judged, the last at its path; the node's rules decide
// what is a share.
func TestFromOCIShareSources(t *testing.T) {
	const vols = "/var/lib/kubelet/pods/u1/volumes/kubernetes.io~"
	oci := shareSpec(
		rbind("/etc/hosts", "/var/lib/kubelet/pods/u1/etc-hosts", "rw"),
		rbind("/data", "/srv/shadowed", "rw"),
		rbind("/data", vols+"empty-dir/data", "rw"),
		rbind("/etc/conf", vols+"configmap/conf", "ro"),
		rbind("/critest", "/tmp/critest/vol", "rw"),
	)
	req, err := FromOCI("c1", "p1", oci, "/bundle", nil, "/run/netns/p1", vmspec.MountRules{HostPaths: []string{"/tmp/critest"}})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		vmspec.ShareTag("/critest"):  "/tmp/critest/vol",
		vmspec.ShareTag("/data"):     vols + "empty-dir/data",
		vmspec.ShareTag("/etc/conf"): vols + "configmap/conf",
	}
	if diff := cmp.Diff(want, req.ShareSources); diff != "" {
		t.Errorf("ShareSources (-want +got):\n%s", diff)
	}
	if len(req.Spec.Shares) != len(want) {
		t.Errorf("shares %+v, want one per source", req.Spec.Shares)
	}

	// Without the node's allowlist the host dir is refused.
	_, err = FromOCI("c1", "p1", oci, "/bundle", nil, "/run/netns/p1", vmspec.MountRules{})
	if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), `mounts["/critest"]: source "/tmp/critest/vol" is not a volume of this pod`) {
		t.Errorf("FromOCI without the allowlist: %v", err)
	}

	// No shares, no map.
	req, err = FromOCI("c1", "p1", shareSpec(), "/bundle", nil, "/run/netns/p1", vmspec.MountRules{})
	if err != nil || req.ShareSources != nil {
		t.Errorf("no mounts: ShareSources %v, err %v", req.ShareSources, err)
	}
}
