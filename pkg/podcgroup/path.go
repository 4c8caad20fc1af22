package podcgroup

import (
	"fmt"
	"path"
	"strings"

	"github.com/containerd/errdefs"
)

// Driver is how the kubelet (and containerd) name cgroups on the node.
type Driver int

const (
	// Cgroupfs: cgroups are directories named by absolute paths.
	Cgroupfs Driver = iota
	// Systemd: cgroups are systemd units (slices and scopes).
	Systemd
)

func (d Driver) String() string {
	switch d {
	case Cgroupfs:
		return "cgroupfs"
	case Systemd:
		return "systemd"
	default:
		return fmt.Sprintf("Driver(%d)", int(d))
	}
}

// Path is a task's cgroupsPath, understood.
type Path struct {
	// Raw is the cgroupsPath as the OCI spec gave it (what checkpoints keep).
	Raw    string
	Driver Driver
	// Dir is where the cgroup lives below each hierarchy's root (v1) or
	// below /sys/fs/cgroup (v2), e.g. /kubepods/pod<uid>/<id>.
	Dir string
	// Slice and Unit name the systemd scope; "" with cgroupfs.
	Slice, Unit string
}

// Parse reads a cgroupsPath in either driver's form. It refuses what no
// kubelet writes: relative or unclean paths, slices that are not .slice
// units, names with a path separator.
func Parse(cgroupsPath string) (Path, error) {
	bad := func(why string) (Path, error) {
		return Path{}, fmt.Errorf("cgroupsPath %q: %s: %w", cgroupsPath, why, errdefs.ErrInvalidArgument)
	}
	switch {
	case cgroupsPath == "":
		return bad("empty; the VM's QEMU must run in a cgroup under the pod's")
	case strings.HasPrefix(cgroupsPath, "/"):
		if path.Clean(cgroupsPath) != cgroupsPath || cgroupsPath == "/" {
			return bad("not a clean path below the cgroup root")
		}
		return Path{Raw: cgroupsPath, Driver: Cgroupfs, Dir: cgroupsPath}, nil
	}
	parts := strings.Split(cgroupsPath, ":")
	if len(parts) != 3 {
		return bad("neither an absolute path (cgroupfs driver) nor slice:prefix:name (systemd driver)")
	}
	slice, prefix, name := parts[0], parts[1], parts[2]
	if slice == "" {
		slice = "system.slice" // what runc does with an empty slice
	}
	dir, err := ExpandSlice(slice)
	if err != nil {
		return bad(err.Error())
	}
	if name == "" || strings.ContainsAny(prefix+name, "/") {
		return bad("the unit name must be non-empty and contain no /")
	}
	unit := name + ".scope"
	if prefix != "" {
		unit = prefix + "-" + unit
	}
	return Path{Raw: cgroupsPath, Driver: Systemd, Dir: dir + "/" + unit, Slice: slice, Unit: unit}, nil
}

// PodDir is the pod-level cgroup: the parent of a pod's task cgroups,
// whose limits the kubelet sets to the pod's limits plus the RuntimeClass
// overhead.
func (p Path) PodDir() string { return path.Dir(p.Dir) }

func (p Path) String() string { return p.Raw }

// Sibling is the cgroup named after p's with "-"+suffix, in the same
// parent: under the pod's cgroup, so the pod's limits bound what runs in
// it, but not in p's (a VM's file servers beside its QEMU).
func (p Path) Sibling(suffix string) Path {
	switch p.Driver {
	case Systemd:
		slice, rest, _ := strings.Cut(p.Raw, ":")
		prefix, name, _ := strings.Cut(rest, ":")
		s, _ := Parse(slice + ":" + prefix + ":" + name + "-" + suffix)
		return s
	default:
		s, _ := Parse(p.Raw + "-" + suffix)
		return s
	}
}

// ExpandSlice turns a systemd slice name into its cgroup directory:
// a-b-c.slice is /a.slice/a-b.slice/a-b-c.slice, and -.slice is the root.
func ExpandSlice(slice string) (string, error) {
	name, ok := strings.CutSuffix(slice, ".slice")
	if !ok || name == "" || strings.Contains(name, "/") {
		return "", fmt.Errorf("slice %q is not a systemd slice name", slice)
	}
	if name == "-" {
		return "/", nil
	}
	var dir strings.Builder
	prefix := ""
	for _, comp := range strings.Split(name, "-") {
		if comp == "" {
			return "", fmt.Errorf("slice %q has an empty component", slice)
		}
		dir.WriteString("/" + prefix + comp + ".slice")
		prefix += comp + "-"
	}
	return dir.String(), nil
}
