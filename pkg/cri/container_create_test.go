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
// readonly mount is a read-only share; an image volume, which this server
// does not mount, is refused naming it.
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
	oci, err := ociSpec(sb, cfg, image{ID: "sha256:0123"})
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
	req, err := vmRequest("c0ffee", sb, cfg, image{ID: "sha256:0123"}, "/images/rootfs", cg, "/pods/5a3d/resolv.conf", vmspec.MountRules{})
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
	_, err = ociSpec(sb, cfg, image{ID: "sha256:0123"})
	if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), `mount /data of image "registry.example/data:v1": vm-runtime cri does not serve image volumes`) {
		t.Errorf("an image volume: %v; want InvalidArgument naming it", err)
	}
}
