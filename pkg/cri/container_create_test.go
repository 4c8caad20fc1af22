package cri

import (
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/google/go-cmp/cmp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/vmpod/vmpod/pkg/vmspec"
)

// TestOCISpecMounts: the kubelet's mounts reach the share rule as
// containerd's CRI writes them (bind, rbind, rprivate, ro or rw), so a
// readonly mount is a read-only share; an image volume as a read-only
// bind of the dir imageVolumes resolved, which the server's rules
// (ImageVolumeRoots) share read-only.
func TestOCISpecMounts(t *testing.T) {
	const vols = "/var/lib/kubelet/pods/uid-1/volumes/kubernetes.io~"
	sb := sandboxRecord{ID: "5a3d0c9b5a3d0c9b", Name: "web", Namespace: "default", UID: "uid-1", Netns: "/run/vmpod/netns/5a3d"}
	cfg := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "vm"},
		Image:    &runtimeapi.ImageSpec{Image: "localhost/vmpod/test-guest:v1"},
		Linux:    &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 256 << 20}},
		Mounts: []*runtimeapi.Mount{
			{ContainerPath: "/etc/conf", HostPath: vols + "configmap/conf", Readonly: true},
			{ContainerPath: "/scratch", HostPath: vols + "empty-dir/scratch"},
			{ContainerPath: "/etc/hosts", HostPath: "/var/lib/kubelet/pods/uid-1/etc-hosts"},
		},
	}
	oci, err := ociSpec(sb, cfg, image{ID: "sha256:0123"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []specs.Mount{
		{Destination: "/etc/conf", Source: vols + "configmap/conf", Type: "bind", Options: []string{"rbind", "rprivate", "ro"}},
		{Destination: "/scratch", Source: vols + "empty-dir/scratch", Type: "bind", Options: []string{"rbind", "rprivate", "rw"}},
		{Destination: "/etc/hosts", Source: "/var/lib/kubelet/pods/uid-1/etc-hosts", Type: "bind", Options: []string{"rbind", "rprivate", "rw"}},
	}
	if diff := cmp.Diff(want, oci.Mounts); diff != "" {
		t.Errorf("mounts (-want +got):\n%s", diff)
	}

	cg, err := containerCgroup("/kubepods/burstable/poduid-1", "c0ffee")
	if err != nil {
		t.Fatal(err)
	}
	req, err := vmRequest("c0ffee", sb, cfg, image{ID: "sha256:0123"}, "/images/rootfs", nil, cg, "/pods/5a3d/resolv.conf", vmspec.MountRules{})
	if err != nil {
		t.Fatal(err)
	}
	wantShares := []vmspec.Share{vmspec.NewShare("/etc/conf", true), vmspec.NewShare("/scratch", false)}
	if diff := cmp.Diff(wantShares, req.Spec.Shares); diff != "" {
		t.Errorf("shares (-want +got):\n%s", diff)
	}
	wantSources := map[string]string{vmspec.ShareTag("/etc/conf"): vols + "configmap/conf", vmspec.ShareTag("/scratch"): vols + "empty-dir/scratch"}
	if diff := cmp.Diff(wantSources, req.ShareSources); diff != "" {
		t.Errorf("share sources (-want +got):\n%s", diff)
	}

	cfg.Mounts = append(cfg.Mounts, &runtimeapi.Mount{ContainerPath: "/data", Image: &runtimeapi.ImageSpec{Image: "registry.example/data:v1"}, Readonly: true})
	_, err = ociSpec(sb, cfg, image{ID: "sha256:0123"}, nil)
	if !errdefs.IsInternal(err) || !strings.Contains(err.Error(), `mount /data of image "registry.example/data:v1": not resolved`) {
		t.Errorf("an image volume not resolved: %v; want Internal naming it", err)
	}
	const imageVols = "/var/lib/vmpod/image-volumes"
	src := imageVols + "/" + sb.ID + "/" + strings.Repeat("cd", 32) + "/etc"
	rules := vmspec.MountRules{ImageVolumeRoots: []string{imageVols}}
	req, err = vmRequest("c0ffee", sb, cfg, image{ID: "sha256:0123"}, "/images/rootfs", map[int]string{3: src}, cg, "/pods/5a3d/resolv.conf", rules)
	if err != nil {
		t.Fatal(err)
	}
	wantShares = []vmspec.Share{vmspec.NewShare("/data", true), vmspec.NewShare("/etc/conf", true), vmspec.NewShare("/scratch", false)}
	if diff := cmp.Diff(wantShares, req.Spec.Shares); diff != "" {
		t.Errorf("shares with an image volume (-want +got):\n%s", diff)
	}
	if got := req.ShareSources[vmspec.ShareTag("/data")]; got != src {
		t.Errorf("the image volume's share is served from %q, want %q", got, src)
	}
}
