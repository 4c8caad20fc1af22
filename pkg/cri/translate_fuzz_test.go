package cri

import (
	"path"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/vmpod/vmpod/pkg/vmspec"
)

// FuzzCRITranslation runs the server's own translation of what the
// kubelet sends (a sandbox, a ContainerConfig) into the VM it asks for:
// ociSpec, then vmd.FromOCI, the mapping both front doors share. Whatever
// the pod's author and the kubelet put in it, it never panics, refuses
// only with InvalidArgument, and what it accepts is the VM the request
// names: the pod's name and namespace, vCPUs from the CPU quota (rounded
// up; 1 without one), guest RAM from the memory limit (whole MiB), the
// sandbox's network namespace and resolv.conf, the container's cgroup,
// the kubelet's oom_score_adj, the cloud-init volume's host dir when
// the pod names one that is mounted, and shares only of the pod's own
// volumes, each read-only as its mount is, and of its sandbox's image
// volumes, read-only, from the dir mounted last at its path.
//
// mounts is a list of mounts, ';' between them, containerPath=hostPath,
// with "=ro" after a read-only one, or containerPath=@subPath for an
// image volume.
func FuzzCRITranslation(f *testing.F) {
	f.Add(vmspec.AnnotationFirmware, "uefi", "", "", int64(200000), int64(100000), int64(1024), int64(256<<20), int64(-997), "")
	f.Add(vmspec.AnnotationCloudInitVolume, "seed", "", "", int64(150000), int64(100000), int64(2), int64(1<<30), int64(1000), "/cloud-init=/var/lib/kubelet/pods/u/volumes/seed;/etc/hosts=/x")
	f.Add(vmspec.AnnotationAccel, "tcg", vmspec.AnnotationDiskBus, "scsi", int64(0), int64(0), int64(0), int64(64<<20), int64(0), "")
	f.Add("vmpod.io/firmwre", "uefi", "", "", int64(1), int64(1), int64(1), int64(1), int64(1), "=")
	f.Add(vmspec.AnnotationCloudInitVolume, "seed", vmspec.AnnotationBoot, "kernel", int64(-5), int64(100000), int64(-1), int64(-1), int64(-2000), "/cloud-init=")
	f.Add("", "", "", "", int64(0), int64(0), int64(0), int64(256<<20), int64(0),
		"/etc/conf=/var/lib/kubelet/pods/uid-1/volumes/kubernetes.io~configmap/conf=ro;/data=/srv/data;/data=/var/lib/kubelet/pods/uid-1/volumes/kubernetes.io~empty-dir/data")
	f.Add("", "", "", "", int64(0), int64(0), int64(0), int64(256<<20), int64(0), "/data=/var/lib/kubelet/pods/uid-2/volumes/kubernetes.io~empty-dir/data")
	f.Add("", "", "", "", int64(0), int64(0), int64(0), int64(256<<20), int64(0), "/data=@;/data/etc=@etc;/x=/var/lib/vmpod/image-volumes/5a3d0c9b5a3d0c9b/ab=ro")
	f.Add("", "", "", "", int64(0), int64(0), int64(0), int64(256<<20), int64(0), "/x=/var/lib/vmpod/image-volumes/0ther/ab;/y=/var/lib/vmpod/image-volumes/5a3d0c9b5a3d0c9b/../0ther/ab")
	const imageVols = "/var/lib/vmpod/image-volumes"
	imageVol := imageVols + "/5a3d0c9b5a3d0c9b/" + strings.Repeat("ab", 32)
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string, quota, period, shares, memory, oomScoreAdj int64, mounts string) {
		sb := sandboxRecord{ID: "5a3d0c9b5a3d0c9b", Name: "web", Namespace: "default", UID: "uid-1", Hostname: "web",
			Annotations: map[string]string{}, Netns: "/run/vmpod/netns/5a3d0c9b5a3d0c9b"}
		cfg := &runtimeapi.ContainerConfig{
			Metadata:    &runtimeapi.ContainerMetadata{Name: "vm"},
			Image:       &runtimeapi.ImageSpec{Image: "localhost/vmpod/test-guest:v1"},
			Annotations: map[string]string{},
			Linux: &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{
				CpuQuota: quota, CpuPeriod: period, CpuShares: shares, MemoryLimitInBytes: memory, OomScoreAdj: oomScoreAdj}},
		}
		// The kubelet copies the pod's annotations to the sandbox; a
		// container's own annotations come from the same pod.
		for _, kv := range [][2]string{{k1, v1}, {k2, v2}} {
			if kv[0] != "" {
				sb.Annotations[kv[0]] = kv[1]
			}
		}
		imageSources := map[int]string{}
		for m := range strings.SplitSeq(mounts, ";") {
			if dst, src, ok := strings.Cut(m, "="); ok {
				if sub, ok := strings.CutPrefix(src, "@"); ok {
					// An image volume, resolved (imageVolumes) to its
					// dir in the sandbox's link to the image.
					imageSources[len(cfg.Mounts)] = path.Join(imageVol, sub)
					cfg.Mounts = append(cfg.Mounts, &runtimeapi.Mount{ContainerPath: dst, Readonly: true,
						Image: &runtimeapi.ImageSpec{Image: "localhost/vmpod/data:v1"}, ImageSubPath: sub})
					continue
				}
				src, ro := strings.CutSuffix(src, "=ro")
				cfg.Mounts = append(cfg.Mounts, &runtimeapi.Mount{ContainerPath: dst, HostPath: src, Readonly: ro})
			}
		}
		cg, err := containerCgroup("/kubepods/burstable/poduid-1", "c0ffee")
		if err != nil {
			t.Fatal(err)
		}
		req, err := vmRequest("c0ffee", sb, cfg, image{ID: "sha256:0123"}, "/images/rootfs", imageSources, cg, "/pods/5a3d/resolv.conf",
			vmspec.MountRules{ImageVolumeRoots: []string{imageVols}})
		if err != nil {
			if !errdefs.IsInvalidArgument(err) {
				t.Fatalf("refused, but not with InvalidArgument: %v", err)
			}
			return
		}
		want := 1
		if quota > 0 && period > 0 {
			want = int((uint64(quota) + uint64(period) - 1) / uint64(period))
		}
		switch {
		case req.Namespace != "default" || req.PodName != "web" || req.PodID != sb.ID:
			t.Fatalf("the pod: %q/%q (%s)", req.Namespace, req.PodName, req.PodID)
		case req.Spec.VCPUs != want:
			t.Fatalf("quota %d period %d: %d vCPUs, want %d", quota, period, req.Spec.VCPUs, want)
		case memory > 0 && req.Spec.MemoryBytes != uint64(memory)&^(1<<20-1):
			t.Fatalf("memory limit %d: guest RAM %d", memory, req.Spec.MemoryBytes)
		case req.Network.Netns != sb.Netns || req.Network.ResolvConf != "/pods/5a3d/resolv.conf" || req.Network.Hostname != "web":
			t.Fatalf("the pod network: %+v", req.Network)
		case req.Rootfs != "/images/rootfs" || len(req.RootfsMounts) > 0:
			t.Fatalf("the image: %q %v", req.Rootfs, req.RootfsMounts)
		case req.Cgroup.Raw != cg.Raw:
			t.Fatalf("QEMU's cgroup %q, want %q", req.Cgroup.Raw, cg.Raw)
		case req.OOMScoreAdj == nil || int64(*req.OOMScoreAdj) != oomScoreAdj:
			t.Fatalf("oom_score_adj %v, want %d", req.OOMScoreAdj, oomScoreAdj)
		}
		if len(req.ShareSources) != len(req.Spec.Shares) {
			t.Fatalf("shares %+v, sources %v: want one source per share", req.Spec.Shares, req.ShareSources)
		}
		for _, sh := range req.Spec.Shares {
			var last *runtimeapi.Mount
			for _, m := range cfg.Mounts {
				if m.ContainerPath == sh.MountPath {
					last = m
				}
			}
			src := req.ShareSources[sh.Tag]
			lastSrc, podVolume := last.GetHostPath(), strings.HasPrefix(src, "/var/lib/kubelet/pods/uid-1/volumes/") ||
				strings.HasPrefix(src, "/var/lib/kubelet/pods/uid-1/volume-subpaths/")
			if last.GetImage() != nil {
				lastSrc = path.Join(imageVol, last.GetImageSubPath())
			}
			switch {
			case last == nil || src != lastSrc:
				t.Fatalf("share %+v from %q: not the dir mounted last at its path (%+v)", sh, src, last)
			case strings.HasPrefix(src, imageVols+"/"+sb.ID+"/"):
				if !sh.ReadOnly {
					t.Fatalf("share %+v of an image volume, from %q: not read-only", sh, src)
				}
			case !podVolume:
				t.Fatalf("share %+v from %q: not a volume of the pod", sh, src)
			case sh.ReadOnly != last.Readonly:
				t.Fatalf("share %+v of a mount readonly=%v", sh, last.Readonly)
			}
		}
		if ci := req.Spec.CloudInit; ci != nil && ci.Volume != "" {
			var src string
			for _, m := range cfg.Mounts {
				if m.ContainerPath == ci.VolumeMountPath {
					src = m.HostPath
				}
			}
			if req.CloudInitDir != src {
				t.Fatalf("cloud-init volume at %q: dir %q, want %q", ci.VolumeMountPath, req.CloudInitDir, src)
			}
		}
	})
}
