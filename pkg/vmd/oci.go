package vmd

import (
	"fmt"
	"path/filepath"

	"github.com/containerd/containerd/v2/core/mount"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/vmpod/vmpod/pkg/podcgroup"
	"github.com/vmpod/vmpod/pkg/vm"
	"github.com/vmpod/vmpod/pkg/vmspec"
)

// FromOCI is the CreateRequest of a container that containerd's CRI
// plugin described in oci (the bundle's config.json): the VM spec
// (vmspec.FromOCI, whose shares are the bind mounts rules accept), QEMU's
// cgroup (the container's cgroupsPath, which must be one: a VM never runs
// outside its pod's limits) and CPU controls, its oom_score_adj, the
// pod's resolv.conf and hostname (the spec's, else the sandbox's name),
// the block volumes, the shares' host dirs, the cloud-init volume, and
// the image: rootfs mounted at <bundle>/rootfs, or the spec's root.
func FromOCI(id, podID string, oci *specs.Spec, bundle string, rootfs []mount.Mount, netns string, rules vmspec.MountRules) (CreateRequest, error) {
	spec, err := vmspec.FromOCI(oci, rules)
	if err != nil {
		return CreateRequest{}, err
	}
	var cgroupsPath string
	var cpu *specs.LinuxCPU
	if oci.Linux != nil {
		cgroupsPath = oci.Linux.CgroupsPath
		if oci.Linux.Resources != nil {
			cpu = oci.Linux.Resources.CPU
		}
	}
	cg, err := podcgroup.Parse(cgroupsPath)
	if err != nil {
		return CreateRequest{}, fmt.Errorf("the VM cannot be charged to its pod: %w", err)
	}
	req := CreateRequest{
		ID: id, PodID: podID, Spec: spec,
		Namespace: oci.Annotations[vmspec.CRISandboxNamespace], PodName: oci.Annotations[vmspec.CRISandboxName],
		Rootfs:       filepath.Join(bundle, "rootfs"),
		RootfsMounts: rootfs,
		Network:      vm.Network{Netns: netns, ResolvConf: vm.MountSource(oci, "/etc/resolv.conf"), Hostname: oci.Hostname},
		BlockDevices: vm.BlockDevicesOf(oci),
		InstanceID:   oci.Annotations[vmspec.CRISandboxUID],
		Cgroup:       cg,
		CPU:          cpu,
	}
	if req.Network.Hostname == "" {
		req.Network.Hostname = oci.Annotations[vmspec.CRISandboxName]
	}
	if oci.Process != nil {
		// containerd's CRI wrote the kubelet's (clamped to containerd's
		// own with restrict_oom_score_adj).
		req.OOMScoreAdj = oci.Process.OOMScoreAdj
	}
	for _, sh := range spec.Shares {
		if req.ShareSources == nil {
			req.ShareSources = make(map[string]string, len(spec.Shares))
		}
		// The source vmspec judged: the last mount of the path.
		req.ShareSources[sh.Tag] = vm.MountSource(oci, sh.MountPath)
	}
	if ci := spec.CloudInit; ci != nil && ci.Volume != "" {
		req.CloudInitDir = vm.MountSource(oci, ci.VolumeMountPath)
	}
	if len(rootfs) == 0 && oci.Root != nil && oci.Root.Path != "" {
		req.Rootfs = oci.Root.Path
		if !filepath.IsAbs(req.Rootfs) {
			req.Rootfs = filepath.Join(bundle, req.Rootfs)
		}
	}
	return req, nil
}
