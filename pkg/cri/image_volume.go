package cri

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containerd/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// An image volume (a CRI Mount with image set: a pod's volumes[].image)
// is the image's unpacked files, which the image store keeps read-only
// for every VM of the image (images.go), shared read-only with the
// guest. The share's source is
//
//	<state root>/image-volumes/<sandbox id>/<image id's hex>[/<sub path>]
//
// where <image id's hex> is a symlink of this server's to the image's
// rootfs: the node's share rule (vmspec.MountRules.ImageVolumeRoots)
// takes a dir below the sandbox's own dir as an image volume of that
// sandbox, as it takes containerd's, and no host path a pod author can
// name before the sandbox exists leads into the image store. A sub path
// is resolved in the image (it may not leave it, through a symlink
// either), so the source has no symlink but the server's own. The links
// go with the sandbox (RemovePodSandbox, or recover for a sandbox no
// checkpoint names). The image stays while a container mounts it: the
// container's record names it (mountRecord.ImageID, checkpointed), and
// RemoveImage refuses an image a record names.

// mountRecord is one of a container's CRI mounts, as checkpointed: what
// ContainerStatus reports, and for an image volume the stored image
// RemoveImage keeps.
type mountRecord struct {
	ContainerPath string `json:"containerPath"`
	// HostPath is the host dir the kubelet named; for an image volume,
	// the dir the guest's share is served from.
	HostPath string `json:"hostPath,omitempty"`
	Readonly bool   `json:"readonly,omitempty"`
	// Image is the image as the mount named it, ImageID the stored one
	// and ImageSubPath the dir in it; empty for a host dir.
	Image        string `json:"image,omitempty"`
	ImageID      string `json:"imageId,omitempty"`
	ImageSubPath string `json:"imageSubPath,omitempty"`
}

// criMount is the mount as ContainerStatus reports it, an image volume
// with the stored image it mounts (image_ref, as PullImage answered).
func (m mountRecord) criMount() *runtimeapi.Mount {
	out := &runtimeapi.Mount{ContainerPath: m.ContainerPath, HostPath: m.HostPath, Readonly: m.Readonly, ImageSubPath: m.ImageSubPath}
	if m.ImageID != "" {
		out.Image = &runtimeapi.ImageSpec{Image: m.Image, ImageRef: m.ImageID}
	}
	return out
}

// imageVolumeDir is where the sandboxes' image volume links are, a dir
// per sandbox (vmspec.MountRules.ImageVolumeRoots), absolute: the share
// rule compares clean absolute paths.
func (c Config) imageVolumeDir() string {
	dir := filepath.Join(c.StateRoot, "image-volumes")
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	return dir
}

// imageVolumes resolves the container's image volumes: for each, by its
// index in cfg's mounts, the dir its share is served from, and the
// container's mounts as its record keeps them. It holds each image as
// useImage does until release (also on error: release is never nil).
func (s *Server) imageVolumes(sandboxID string, cfg *runtimeapi.ContainerConfig) (sources map[int]string, mounts []mountRecord, release func(), _ error) {
	var releases []func()
	release = func() {
		for _, r := range releases {
			r()
		}
	}
	for i, m := range cfg.GetMounts() {
		rec := mountRecord{ContainerPath: m.GetContainerPath(), HostPath: m.GetHostPath(), Readonly: m.GetReadonly()}
		if m.GetImage() == nil {
			mounts = append(mounts, rec)
			continue
		}
		ref := m.GetImage().GetImage()
		what := fmt.Sprintf("mount %s of image %q", m.GetContainerPath(), ref)
		switch {
		case ref == "":
			return nil, nil, release, errorf(errdefs.ErrInvalidArgument, "mount %s: an image volume names no image", m.GetContainerPath())
		case m.GetHostPath() != "":
			return nil, nil, release, errorf(errdefs.ErrInvalidArgument, "%s: has a host path too (%q); an image volume has none", what, m.GetHostPath())
		case !m.GetReadonly():
			// As containerd: the kubelet always mounts an image read-only,
			// and its files are every VM's of the image.
			return nil, nil, release, errorf(errdefs.ErrInvalidArgument, "%s: not read-only; an image volume is read-only", what)
		}
		img, r, err := s.useImage(ref)
		if err != nil {
			return nil, nil, release, fmt.Errorf("%s: %w", what, err)
		}
		releases = append(releases, r)
		rootfs, err := s.images.Rootfs(img.ID)
		if err != nil {
			return nil, nil, release, err
		}
		sub, err := imageSubDir(rootfs, m.GetImageSubPath())
		if err != nil {
			return nil, nil, release, errorf(errdefs.ErrInvalidArgument, "%s: image_sub_path %q: %v", what, m.GetImageSubPath(), err)
		}
		link, err := s.imageVolumeLink(sandboxID, img.ID, rootfs)
		if err != nil {
			return nil, nil, release, err
		}
		if sources == nil {
			sources = map[int]string{}
		}
		sources[i] = filepath.Join(link, sub)
		rec.HostPath, rec.Readonly = sources[i], true
		rec.Image, rec.ImageID, rec.ImageSubPath = ref, img.ID, m.GetImageSubPath()
		mounts = append(mounts, rec)
	}
	return sources, mounts, release, nil
}

// imageSubDir resolves sub, a path in the image whose files are at
// rootfs, to the dir it names there, as a path relative to rootfs with
// no symlink in it ("" for the image's root). It refuses a path that
// leaves the image (absolute, through "..", or through a symlink of the
// image's), one that does not exist, and one that is not a dir (virtio-fs
// shares dirs; the KEP leaves single files out too).
func imageSubDir(rootfs, sub string) (string, error) {
	if sub == "" {
		return "", nil
	}
	if path.IsAbs(sub) || slices.Contains(strings.Split(sub, "/"), "..") {
		return "", errors.New("leaves the image: want a path in it, with no \"..\"")
	}
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return "", err
	}
	defer root.Close()
	f, err := root.Open(sub) // symlinks followed within the image only
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("is a file, not a dir: a VM's guest gets dirs only, shared by virtio-fs")
	}
	// Where it was found, with the image's symlinks resolved.
	real, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", f.Fd()))
	if err != nil {
		return "", err
	}
	rootReal, err := filepath.EvalSymlinks(rootfs)
	if err != nil {
		return "", err
	}
	rel, err := filepath.Rel(rootReal, real)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", fmt.Errorf("resolves to %s, outside the image", real)
	}
	if rel == "." {
		rel = ""
	}
	return rel, nil
}

// imageVolumeLink is the sandbox's link to the image with id, whose files
// are at rootfs, made if missing.
func (s *Server) imageVolumeLink(sandboxID, id, rootfs string) (string, error) {
	_, hex, _ := strings.Cut(id, ":")
	dir := filepath.Join(s.cfg.imageVolumeDir(), sandboxID)
	link := filepath.Join(dir, hex)
	if target, err := os.Readlink(link); err == nil && target == rootfs {
		return link, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", errorf(errdefs.ErrInternal, "image volumes of sandbox %s: %v", sandboxID, err)
	}
	// A link to another place (a state root moved) is replaced.
	if err := os.Remove(link); err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", errorf(errdefs.ErrInternal, "image volume link %s: %v", link, err)
	}
	if err := os.Symlink(rootfs, link); err != nil {
		return "", errorf(errdefs.ErrInternal, "image volume link %s: %v", link, err)
	}
	return link, nil
}

// removeImageVolumes removes the sandbox's image volume links (never what
// they lead to).
func (s *Server) removeImageVolumes(sandboxID string) error {
	if err := os.RemoveAll(filepath.Join(s.cfg.imageVolumeDir(), sandboxID)); err != nil {
		return errorf(errdefs.ErrInternal, "image volumes of sandbox %s: %v", sandboxID, err)
	}
	return nil
}

// imageVolumeUser is a container whose mounts hold the image with id, and
// where; "" when none does.
func imageVolumeUser(rec containerRecord, id string) string {
	for _, m := range rec.Mounts {
		if m.ImageID == id {
			return m.ContainerPath
		}
	}
	return ""
}
