package vmspec

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// DefaultKubeletRoot is the kubelet's default --root-dir.
const DefaultKubeletRoot = "/var/lib/kubelet"

// DefaultContainerdStateDir is containerd's default state dir (the
// `state` of its config).
const DefaultContainerdStateDir = "/run/containerd"

// ContainerdImageVolumes is where containerd's CRI (2.x) mounts image
// volumes, below containerd's state dir: each image a pod mounts is a
// snapshot of its own (an overlay) at
// <state>/io.containerd.grpc.v1.cri/image-volumes/<sandbox ID>/<manifest
// digest hex>, and the container's mount is a bind of that dir, or of a
// dir in it (image_sub_path, symlinks resolved), always read-only.
func ContainerdImageVolumes(stateDir string) string {
	return path.Join(stateDir, "io.containerd.grpc.v1.cri", "image-volumes")
}

// MountRules say which of a container's bind mounts a node shares with
// the guest (FromOCI): the pod's own volumes, which the kubelet mounts
// under its root dir, the pod's image volumes, which the container
// runtime mounts, and the host dirs a node admin allows. Every other
// host path the container would get (a hostPath volume above all, or
// another pod's volume) is refused.
type MountRules struct {
	// KubeletRoot is the kubelet's --root-dir as the sources of the
	// container's mounts spell it: the kubelet's spelling (the CRI
	// server), or with symlinks resolved (containerd resolves them in a
	// source). Empty: DefaultKubeletRoot.
	KubeletRoot string
	// ImageVolumeRoots are the dirs where the container runtime puts
	// each pod's image volumes, a dir per sandbox: a source below
	// <root>/<sandbox ID>/ (the spec's io.kubernetes.cri.sandbox-id) is
	// an image volume of that sandbox, shared read-only whatever the
	// mount says; another sandbox's is refused. Spelt as the sources
	// spell them (containerd resolves symlinks). nil: containerd's with
	// its default state dir, ContainerdImageVolumes(DefaultContainerdStateDir);
	// empty but not nil: none.
	ImageVolumeRoots []string
	// HostPaths are host dirs a node admin allows to be shared, each
	// with what is below it (critest's volumes are dirs under /tmp).
	// None by default. The scheduler plugin (FromPod) still refuses a
	// pod's hostPath volumes: the list is for a node's own CRI clients.
	HostPaths []string
}

// Validate checks that the rules name clean absolute paths, and that no
// host path is "/", which would share the node's whole file system.
func (r MountRules) Validate() error {
	if r.KubeletRoot != "" && !cleanAbs(r.KubeletRoot) {
		return fmt.Errorf("kubelet root dir %q: want a clean absolute path: %w", r.KubeletRoot, errdefs.ErrInvalidArgument)
	}
	for _, p := range r.ImageVolumeRoots {
		switch {
		case !cleanAbs(p):
			return fmt.Errorf("image volume dir %q: want a clean absolute path: %w", p, errdefs.ErrInvalidArgument)
		case p == "/":
			return fmt.Errorf("image volume dir %q: would share the node's whole file system: %w", p, errdefs.ErrInvalidArgument)
		}
	}
	for _, p := range r.HostPaths {
		switch {
		case !cleanAbs(p):
			return fmt.Errorf("host path %q: want a clean absolute path: %w", p, errdefs.ErrInvalidArgument)
		case p == "/":
			return fmt.Errorf("host path %q: would share the node's whole file system: %w", p, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// forPod is the rules for the pod whose sandbox UID is uid and whose
// sandbox ID is sandboxID.
func (r MountRules) forPod(uid, sandboxID string) podMountRules {
	root := r.KubeletRoot
	if root == "" {
		root = DefaultKubeletRoot
	}
	p := podMountRules{hostPaths: r.HostPaths}
	// The UID is one path segment; anything else names no pod dir, and
	// then no mount is a volume of this pod.
	if pathSegment(uid) {
		p.podDir = path.Join(root, "pods", uid)
	}
	imageRoots := r.ImageVolumeRoots
	if imageRoots == nil {
		imageRoots = []string{ContainerdImageVolumes(DefaultContainerdStateDir)}
	}
	if pathSegment(sandboxID) {
		for _, dir := range imageRoots {
			p.imageVolumeDirs = append(p.imageVolumeDirs, path.Join(dir, sandboxID))
		}
	}
	return p
}

// pathSegment reports whether s is one path segment of its own.
func pathSegment(s string) bool {
	return s != "" && s != "." && s != ".." && !strings.ContainsAny(s, "/\x00")
}

// podMountRules are MountRules applied to one pod.
type podMountRules struct {
	// podDir is the kubelet's dir of the pod, <kubelet root>/pods/<uid>;
	// "" when the spec names no pod UID.
	podDir string
	// imageVolumeDirs are the runtime's dirs of the sandbox's image
	// volumes, <root>/<sandbox ID>; none when the spec names no sandbox.
	imageVolumeDirs []string
	hostPaths       []string
}

// sandboxFiles are the files containerd's CRI mounts from the sandbox's
// own dirs (linuxContainerMounts) when the kubelet does not mount one
// there: the guest gets its host name and DNS by DHCP, its hosts file
// from its image, and a /dev/shm of its own kernel.
var sandboxFiles = []string{"/etc/hostname", "/etc/hosts", "/etc/resolv.conf", "/dev/shm"}

// share judges one of the container's mounts: the share it becomes, or
// ok false when it is no share (not a bind mount, or the kubelet's or the
// runtime's own file), or why the guest may not have it.
func (p podMountRules) share(m specs.Mount) (_ Share, ok bool, _ error) {
	switch {
	case !isBindMount(m):
		return Share{}, false, nil
	case p.isPodVolume(m.Source):
		return NewShare(m.Destination, isReadOnlyMount(m)), true, nil
	case p.isImageVolume(m.Source):
		// An image's files are the image's: never the guest's to write.
		return NewShare(m.Destination, true), true, nil
	case p.isKubeletFile(m.Source), slices.Contains(sandboxFiles, m.Destination):
		return Share{}, false, nil
	case p.isAllowedHostPath(m.Source):
		return NewShare(m.Destination, isReadOnlyMount(m)), true, nil
	}
	return Share{}, false, invalid(fmt.Sprintf("mounts[%q]", m.Destination), "",
		fmt.Sprintf("source %q is not a volume of this pod, so it is not shared with the guest: "+
			"a VM's guest gets the pod's own volumes (configMap, secret, downwardAPI, projected, emptyDir, "+
			"persistentVolumeClaim, ephemeral, csi, image), never a hostPath volume or another pod's; "+
			"a node admin may allow host dirs with vm-runtime's --volume-host-paths", m.Source))
}

// isPodVolume reports whether src is a volume the kubelet mounted for this
// pod: <pod dir>/volumes/<plugin>/<name> (a CSI volume: .../<name>/mount)
// or a subPath it bind-mounted, <pod dir>/volume-subpaths/<volume>/<container>/<index>.
func (p podMountRules) isPodVolume(src string) bool {
	return p.podDir != "" && (below(src, p.podDir+"/volumes") || below(src, p.podDir+"/volume-subpaths"))
}

// isImageVolume reports whether src is an image volume the runtime
// mounted for this sandbox, or a dir in one: <root>/<sandbox ID>/<image>[/<sub path>].
func (p podMountRules) isImageVolume(src string) bool {
	return slices.ContainsFunc(p.imageVolumeDirs, func(dir string) bool { return below(src, dir) })
}

// isKubeletFile reports whether src is one of the kubelet's own files of
// this pod: a container's termination log (<pod dir>/containers/<name>/<id>)
// or the pod's hosts file.
func (p podMountRules) isKubeletFile(src string) bool {
	return p.podDir != "" && (below(src, p.podDir+"/containers") || src == p.podDir+"/etc-hosts")
}

func (p podMountRules) isAllowedHostPath(src string) bool {
	return slices.ContainsFunc(p.hostPaths, func(dir string) bool { return within(src, dir) })
}

// isBindMount reports a bind mount: containerd's CRI writes type "bind"
// and option "rbind"; runc takes either option for one.
func isBindMount(m specs.Mount) bool {
	return m.Type == "bind" || slices.Contains(m.Options, "bind") || slices.Contains(m.Options, "rbind")
}

// isReadOnlyMount reports a read-only mount: "ro", or "rro" (recursively
// read-only), as containerd's CRI writes a read-only CRI mount.
func isReadOnlyMount(m specs.Mount) bool {
	return slices.Contains(m.Options, "ro") || slices.Contains(m.Options, "rro")
}

// visibleMounts are the mounts the container would see: the last of each
// destination, whose source is the one the node resolves
// (vm.MountSource), in their order.
func visibleMounts(mounts []specs.Mount) []specs.Mount {
	last := make(map[string]int, len(mounts))
	for i, m := range mounts {
		last[m.Destination] = i
	}
	var visible []specs.Mount
	for i, m := range mounts {
		if last[m.Destination] == i {
			visible = append(visible, m)
		}
	}
	return visible
}

// sharesFromMounts are the shares of the container's visible mounts
// (sorted), and every mount refused. The cloud-init volume's mount at
// cloudInitPath is the seed, not a share.
func sharesFromMounts(visible []specs.Mount, rules podMountRules, cloudInitPath string) ([]Share, error) {
	var shares []Share
	var errs []error
	for _, m := range visible {
		if cloudInitPath != "" && m.Destination == cloudInitPath {
			continue
		}
		sh, ok, err := rules.share(m)
		switch {
		case err != nil:
			errs = append(errs, err)
		case ok:
			shares = append(shares, sh)
		}
	}
	SortShares(shares)
	return shares, errors.Join(errs...)
}

// within reports whether p is dir or below it, for a clean absolute p,
// by whole path segments: /tmp/ab is not within /tmp/a.
func within(p, dir string) bool {
	return cleanAbs(p) && (p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/"))
}

// below reports whether p is strictly below dir.
func below(p, dir string) bool { return p != dir && within(p, dir) }

func cleanAbs(p string) bool { return path.IsAbs(p) && path.Clean(p) == p }
