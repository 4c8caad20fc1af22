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

// MountRules say which of a container's bind mounts a node shares with
// the guest (FromOCI): the pod's own volumes, which the kubelet mounts
// under its root dir, and the host dirs a node admin allows. Every other
// host path the container would get (a hostPath volume above all, or
// another pod's volume) is refused.
type MountRules struct {
	// KubeletRoot is the kubelet's --root-dir as the sources of the
	// container's mounts spell it: the kubelet's spelling (the CRI
	// server), or with symlinks resolved (containerd resolves them in a
	// source). Empty: DefaultKubeletRoot.
	KubeletRoot string
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

// forPod is the rules for the pod whose sandbox UID is uid.
func (r MountRules) forPod(uid string) podMountRules {
	root := r.KubeletRoot
	if root == "" {
		root = DefaultKubeletRoot
	}
	p := podMountRules{hostPaths: r.HostPaths}
	// The UID is one path segment; anything else names no pod dir, and
	// then no mount is a volume of this pod.
	if uid != "" && uid != "." && uid != ".." && !strings.ContainsAny(uid, "/\x00") {
		p.podDir = path.Join(root, "pods", uid)
	}
	return p
}

// podMountRules are MountRules applied to one pod.
type podMountRules struct {
	// podDir is the kubelet's dir of the pod, <kubelet root>/pods/<uid>;
	// "" when the spec names no pod UID.
	podDir    string
	hostPaths []string
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
	case p.isKubeletFile(m.Source), slices.Contains(sandboxFiles, m.Destination):
		return Share{}, false, nil
	case p.isAllowedHostPath(m.Source):
		return NewShare(m.Destination, isReadOnlyMount(m)), true, nil
	}
	return Share{}, false, invalid(fmt.Sprintf("mounts[%q]", m.Destination), "",
		fmt.Sprintf("source %q is not a volume of this pod, so it is not shared with the guest: "+
			"a VM's guest gets the pod's own volumes (configMap, secret, downwardAPI, projected, emptyDir, "+
			"persistentVolumeClaim, ephemeral, csi), never a hostPath volume or another pod's; "+
			"a node admin may allow host dirs with vm-runtime's --volume-host-paths", m.Source))
}

// isPodVolume reports whether src is a volume the kubelet mounted for this
// pod: <pod dir>/volumes/<plugin>/<name> (a CSI volume: .../<name>/mount)
// or a subPath it bind-mounted, <pod dir>/volume-subpaths/<volume>/<container>/<index>.
func (p podMountRules) isPodVolume(src string) bool {
	return p.podDir != "" && (below(src, p.podDir+"/volumes") || below(src, p.podDir+"/volume-subpaths"))
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
