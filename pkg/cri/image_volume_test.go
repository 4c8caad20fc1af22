package cri

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/vmpod/vmpod/pkg/vmd"
	"github.com/vmpod/vmpod/pkg/vmspec"
)

// storeImage puts an image with id's hex (64 digits) and tag ref into s's
// store, as a pull leaves it: its record, and files made by fill in its
// rootfs, which it returns.
func storeImage(t *testing.T, s *Server, hex, ref string, fill func(rootfs string)) (image, string) {
	t.Helper()
	img := &image{ID: "sha256:" + hex, RepoTags: []string{ref}}
	rootfs, err := s.images.Rootfs(img.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(rootfs, 0o700); err != nil {
		t.Fatal(err)
	}
	if fill != nil {
		fill(rootfs)
	}
	if err := s.images.save(img); err != nil {
		t.Fatal(err)
	}
	s.images.mu.Lock()
	s.images.images[img.ID] = img
	s.images.mu.Unlock()
	return *img, rootfs
}

// toolsImage fills a rootfs as a small image: dirs etc and usr/bin, a
// file etc/passwd, and symlinks within the image (conf, to etc) and out
// of it (host-etc, to /etc; up, to ../../..).
func toolsImage(t *testing.T) func(string) {
	return func(rootfs string) {
		for _, d := range []string{"etc", "usr/bin"} {
			if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(rootfs, "etc/passwd"), []byte("root:x:0:0::/:/bin/sh\n"), 0o444); err != nil {
			t.Fatal(err)
		}
		for link, target := range map[string]string{"conf": "etc", "usr/conf": "../etc", "host-etc": "/etc", "up": "../../.."} {
			if err := os.Symlink(target, filepath.Join(rootfs, link)); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestImageVolumes: a container's image volume is the stored image it
// names, whole or a dir in it (image_sub_path, resolved in the image),
// served from the sandbox's link to the image's files, which the
// server's share rule shares read-only; what cannot be one is refused
// naming the mount.
func TestImageVolumes(t *testing.T) {
	s := newIdleServer(t)
	const ref = "registry.example/tools:v1"
	hex := strings.Repeat("cd", 32)
	img, rootfs := storeImage(t, s, hex, ref, toolsImage(t))
	const sbx = "5a3d0c9b5a3d0c9b"
	link := filepath.Join(s.cfg.imageVolumeDir(), sbx, hex)
	mount := func(path, sub string) *runtimeapi.Mount {
		return &runtimeapi.Mount{ContainerPath: path, Readonly: true, Image: &runtimeapi.ImageSpec{Image: ref}, ImageSubPath: sub}
	}

	t.Run("whole, and dirs in it", func(t *testing.T) {
		cfg := &runtimeapi.ContainerConfig{Mounts: []*runtimeapi.Mount{
			{ContainerPath: "/scratch", HostPath: "/var/lib/kubelet/pods/uid-1/volumes/kubernetes.io~empty-dir/scratch"},
			mount("/tools", ""), mount("/etc/tools", "etc/"), mount("/conf", "conf"), mount("/usr/conf", "usr/conf"), mount("/dot", "."),
		}}
		sources, mounts, release, err := s.imageVolumes(sbx, cfg)
		defer release()
		if err != nil {
			t.Fatal(err)
		}
		want := map[int]string{1: link, 2: link + "/etc", 3: link + "/etc", 4: link + "/etc", 5: link}
		if diff := cmp.Diff(want, sources); diff != "" {
			t.Errorf("sources (-want +got):\n%s", diff)
		}
		if got, err := os.Readlink(link); err != nil || got != rootfs {
			t.Errorf("the sandbox's link to the image: %q, %v; want %q", got, err, rootfs)
		}
		wantMounts := []mountRecord{
			{ContainerPath: "/scratch", HostPath: "/var/lib/kubelet/pods/uid-1/volumes/kubernetes.io~empty-dir/scratch"},
			{ContainerPath: "/tools", HostPath: link, Readonly: true, Image: ref, ImageID: img.ID},
			{ContainerPath: "/etc/tools", HostPath: link + "/etc", Readonly: true, Image: ref, ImageID: img.ID, ImageSubPath: "etc/"},
			{ContainerPath: "/conf", HostPath: link + "/etc", Readonly: true, Image: ref, ImageID: img.ID, ImageSubPath: "conf"},
			{ContainerPath: "/usr/conf", HostPath: link + "/etc", Readonly: true, Image: ref, ImageID: img.ID, ImageSubPath: "usr/conf"},
			{ContainerPath: "/dot", HostPath: link, Readonly: true, Image: ref, ImageID: img.ID, ImageSubPath: "."},
		}
		if diff := cmp.Diff(wantMounts, mounts); diff != "" {
			t.Errorf("the record's mounts (-want +got):\n%s", diff)
		}
		// While the container is being made, the image is held.
		_, err = s.RemoveImage(context.Background(), &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
		if !errdefs.IsFailedPrecondition(err) {
			t.Errorf("RemoveImage while a container mounting it is made: %v, want FailedPrecondition", err)
		}

		// The share rule of the server takes them, read-only.
		cfg.Metadata, cfg.Image = &runtimeapi.ContainerMetadata{Name: "vm"}, &runtimeapi.ImageSpec{Image: ref}
		cfg.Linux = &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 256 << 20}}
		sb := sandboxRecord{ID: sbx, Name: "web", Namespace: "default", UID: "uid-1", Netns: "/run/vmpod/netns/" + sbx}
		cg, err := containerCgroup("/kubepods/burstable/poduid-1", "c0ffee")
		if err != nil {
			t.Fatal(err)
		}
		req, err := vmRequest("c0ffee", sb, cfg, img, rootfs, sources, cg, "/pods/5a3d/resolv.conf", s.cfg.Mounts)
		if err != nil {
			t.Fatal(err)
		}
		var wantShares []vmspec.Share
		for _, p := range []string{"/conf", "/dot", "/etc/tools", "/tools", "/usr/conf"} {
			wantShares = append(wantShares, vmspec.NewShare(p, true))
		}
		wantShares = append(wantShares, vmspec.NewShare("/scratch", false))
		vmspec.SortShares(wantShares)
		if diff := cmp.Diff(wantShares, req.Spec.Shares); diff != "" {
			t.Errorf("shares (-want +got):\n%s", diff)
		}
		if got := req.ShareSources[vmspec.ShareTag("/etc/tools")]; got != link+"/etc" {
			t.Errorf("/etc/tools is served from %q, want %q", got, link+"/etc")
		}
		if fi, err := os.Stat(req.ShareSources[vmspec.ShareTag("/tools")]); err != nil || !fi.IsDir() {
			t.Errorf("the whole image's source is no dir: %v", err)
		}
	})

	for _, tt := range []struct {
		name  string
		mount *runtimeapi.Mount
		class func(error) bool
		want  string
	}{
		{"a sub path that is a file", mount("/p", "etc/passwd"), errdefs.IsInvalidArgument,
			`mount /p of image "registry.example/tools:v1": image_sub_path "etc/passwd": is a file`},
		{"a sub path the image lacks", mount("/p", "not-existing"), errdefs.IsInvalidArgument,
			`mount /p of image "registry.example/tools:v1": image_sub_path "not-existing": openat not-existing: no such file or directory`},
		{"a sub path that steps back", mount("/p", "etc/../../x"), errdefs.IsInvalidArgument,
			`image_sub_path "etc/../../x": leaves the image`},
		{"an absolute sub path", mount("/p", "/etc"), errdefs.IsInvalidArgument, `image_sub_path "/etc": leaves the image`},
		{"a sub path through a symlink to a host dir", mount("/p", "host-etc"), errdefs.IsInvalidArgument,
			`mount /p of image "registry.example/tools:v1": image_sub_path "host-etc": openat host-etc: path escapes from parent`},
		{"a sub path through a symlink up", mount("/p", "up"), errdefs.IsInvalidArgument, `image_sub_path "up": openat up: path escapes from parent`},
		{"read-write", &runtimeapi.Mount{ContainerPath: "/p", Image: &runtimeapi.ImageSpec{Image: ref}}, errdefs.IsInvalidArgument,
			`mount /p of image "registry.example/tools:v1": not read-only; an image volume is read-only`},
		{"a host path too", &runtimeapi.Mount{ContainerPath: "/p", HostPath: "/srv", Readonly: true, Image: &runtimeapi.ImageSpec{Image: ref}},
			errdefs.IsInvalidArgument, `mount /p of image "registry.example/tools:v1": has a host path too ("/srv")`},
		{"no image named", &runtimeapi.Mount{ContainerPath: "/p", Readonly: true, Image: &runtimeapi.ImageSpec{}},
			errdefs.IsInvalidArgument, `mount /p: an image volume names no image`},
		{"an image not pulled", &runtimeapi.Mount{ContainerPath: "/p", Readonly: true, Image: &runtimeapi.ImageSpec{Image: "registry.example/absent:v1"}},
			errdefs.IsNotFound, `mount /p of image "registry.example/absent:v1": image "registry.example/absent:v1" is not pulled`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, _, release, err := s.imageVolumes(sbx, &runtimeapi.ContainerConfig{Mounts: []*runtimeapi.Mount{mount("/ok", ""), tt.mount}})
			release()
			if !tt.class(err) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("%v; want it of its class, containing %q", err, tt.want)
			}
		})
	}
	// Nothing is held after a refusal: the image goes.
	if _, err := s.RemoveImage(context.Background(), &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}}); err != nil {
		t.Errorf("RemoveImage of an image no container holds: %v", err)
	}
	// The links go with the sandbox, never what they lead to.
	if err := s.removeImageVolumes(sbx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Dir(link)); !os.IsNotExist(err) {
		t.Errorf("the sandbox's image volume links after its removal: %v", err)
	}
}

// TestRemoveImageUsedAsVolume: an image a container mounts as a volume
// cannot be removed while the container is there, before and after a
// restart of the server (its record is checkpointed), and
// ContainerStatus reports the mount with the image it holds; once the
// container is gone, the image goes. A restart removes the links of a
// sandbox no checkpoint names.
func TestRemoveImageUsedAsVolume(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	cfg := Config{Config: vmd.Config{StateRoot: dir}, NetnsDir: dir + "/netns", CNIConfDir: dir + "/cni"}
	s, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	const ref, vmImage = "registry.example/tools:v1", "localhost/vmpod/test-guest:v1"
	img, _ := storeImage(t, s, strings.Repeat("cd", 32), ref, nil)
	guest, _ := storeImage(t, s, strings.Repeat("ef", 32), vmImage, nil)
	link := filepath.Join(s.cfg.imageVolumeDir(), "5a3d0c9b", strings.Repeat("cd", 32))
	rec := containerRecord{ID: "c0ffee", SandboxID: "5a3d0c9b", Name: "vm", Image: vmImage, ImageID: guest.ID, State: containerExited,
		Mounts: []mountRecord{{ContainerPath: "/tools", HostPath: link + "/etc", Readonly: true, Image: ref, ImageID: img.ID, ImageSubPath: "etc"}}}
	c := newContainer(s.cfg, rec)
	if err := c.Update(func(r *containerRecord) error { *r = rec; return nil }); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.containers[rec.ID] = c
	s.mu.Unlock()
	// A sandbox's links, the sandbox gone without its removal finishing.
	stray := filepath.Join(s.cfg.imageVolumeDir(), "gone")
	if err := os.MkdirAll(stray, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/nowhere", filepath.Join(stray, "ab")); err != nil {
		t.Fatal(err)
	}

	check := func(s *Server, when string) {
		t.Helper()
		_, err := s.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
		if !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "is used by container c0ffee as a volume at /tools") {
			t.Errorf("%s: RemoveImage of an image a container mounts: %v; want FailedPrecondition naming the container and the mount", when, err)
		}
		if _, ok := s.images.Get(ref); !ok {
			t.Fatalf("%s: the image is gone", when)
		}
		st, err := s.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: rec.ID})
		if err != nil {
			t.Fatal(err)
		}
		want := []*runtimeapi.Mount{{ContainerPath: "/tools", HostPath: link + "/etc", Readonly: true, ImageSubPath: "etc",
			Image: &runtimeapi.ImageSpec{Image: ref, ImageRef: img.ID}}}
		if diff := cmp.Diff(want, st.GetStatus().GetMounts(), protocmp.Transform()); diff != "" {
			t.Errorf("%s: ContainerStatus mounts (-want +got):\n%s", when, diff)
		}
		// The list and the other image are as before.
		list, err := s.ListImages(ctx, &runtimeapi.ListImagesRequest{})
		if err != nil || len(list.GetImages()) != 2 {
			t.Errorf("%s: ListImages: %v, %v; want both images", when, list.GetImages(), err)
		}
	}
	check(s, "before a restart")
	s.Close()

	s, err = New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	check(s, "after a restart")
	if _, err := os.Lstat(stray); !os.IsNotExist(err) {
		t.Errorf("the links of a sandbox no checkpoint names, after a restart: %v", err)
	}

	if _, err := s.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: rec.ID}); err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{ref, vmImage} {
		if _, err := s.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: r}}); err != nil {
			t.Errorf("RemoveImage %s once no container uses it: %v", r, err)
		}
	}
}
