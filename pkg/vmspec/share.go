package vmspec

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
)

// Share is a filesystem volume of the pod (a ConfigMap, Secret, projected,
// downward API, emptyDir or PVC directory) that the guest mounts from a
// virtio-fs share at the container's mountPath (issue 24). Like Volume it
// holds no host path: the front door resolves the directory it shares, and
// the runtime's file server serves it (convert.Paths.Shares names the
// server's socket).
//
// Both front doors make Shares, by one rule (FromPod from the pod's
// volumes, FromOCI from the container's bind mounts under the node's
// MountRules), and the converter turns them into the domain's virtio-fs
// devices; what the runtime serves so far: docs/volumes.md.
type Share struct {
	// Tag is the virtio-fs tag the guest mounts the share by, made from
	// MountPath alone (ShareTag), so both front doors give the same.
	Tag string
	// MountPath is where the container mounts the volume
	// (volumeMounts[].mountPath), and where the guest does.
	MountPath string
	// ReadOnly makes the share itself refuse writes, not only the guest's
	// mount.
	ReadOnly bool
}

// MaxShares is the most virtio-fs shares a VM gets: each is a device and a
// file server process of its own.
const MaxShares = 16

// MaxShareTagLen is the longest virtio-fs tag QEMU accepts.
const MaxShareTagLen = 36

// shareTagPrefix starts every tag. The colon keeps cloud-init's mounts
// module (22.4, Debian 12's) from dropping the entry as no block device:
// it takes "<something>:<path>" for a network filesystem and writes it.
const shareTagPrefix = "vmpod:"

// shareTagPattern is what ShareTag makes, and so what Validate accepts.
var shareTagPattern = regexp.MustCompile(`^vmpod:[A-Za-z0-9][A-Za-z0-9.-]{0,19}_[0-9a-f]{8}$`)

// ShareTag names the share of the volume mounted at mountPath: "vmpod:",
// up to 20 characters of the path's base name ([A-Za-z0-9.-], "share" if
// none are left), "_" and 8 hex digits of the path's SHA-256. At most 35
// bytes; stable; but for a hash collision, unique per path.
func ShareTag(mountPath string) string {
	sum := sha256.Sum256([]byte(mountPath))
	base := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '.':
			return r
		}
		return -1
	}, path.Base(mountPath))
	base = strings.TrimLeft(base, ".-")
	if len(base) > 20 {
		base = base[:20]
	}
	if base == "" {
		base = "share"
	}
	return shareTagPrefix + base + "_" + hex.EncodeToString(sum[:4])
}

// NewShare is the share of the volume the container mounts at mountPath.
func NewShare(mountPath string, readOnly bool) Share {
	return Share{Tag: ShareTag(mountPath), MountPath: mountPath, ReadOnly: readOnly}
}

// SortShares puts shares in the order of their mount paths, the order
// both front doors give and the guest mounts them in (a parent before the
// volumes mounted below it).
func SortShares(shares []Share) {
	slices.SortFunc(shares, func(a, b Share) int { return cmp.Compare(a.MountPath, b.MountPath) })
}

// sharePathsRefused are where a share may not be mounted in the guest:
// its kernel's own filesystems.
var sharePathsRefused = []string{"/proc", "/sys", "/dev"}

func (s Spec) validateShares() error {
	if len(s.Shares) > MaxShares {
		return invalid("spec.containers[0].volumeMounts", fmt.Sprintf("%d volumes", len(s.Shares)),
			fmt.Sprintf("a VM pod shares at most %d filesystem volumes with its guest (each is a virtio-fs device and a file server process)", MaxShares))
	}
	tags, paths := map[string]bool{}, map[string]bool{}
	for i, sh := range s.Shares {
		field := fmt.Sprintf("spec.containers[0].volumeMounts[%d].mountPath", i)
		p := sh.MountPath
		switch {
		case p == "":
			return invalid(field, "", "required")
		case !path.IsAbs(p) || path.Clean(p) != p:
			return invalid(field, p, "want a clean absolute path")
		case p == "/":
			return invalid(field, p, "a volume cannot be the guest's root")
		case slices.ContainsFunc(sharePathsRefused, func(r string) bool { return p == r || strings.HasPrefix(p, r+"/") }):
			return invalid(field, p, "under the guest kernel's own "+strings.Join(sharePathsRefused, ", "))
		case paths[p]:
			return invalid(field, p, "mounted twice")
		case sh.Tag != ShareTag(p) || !shareTagPattern.MatchString(sh.Tag) || len(sh.Tag) > MaxShareTagLen:
			return invalid(field, p, fmt.Sprintf("virtio-fs tag %q is not the path's (%s)", sh.Tag, ShareTag(p)))
		case tags[sh.Tag]:
			return invalid(field, p, fmt.Sprintf("gives the virtio-fs tag %q of an earlier volume", sh.Tag))
		}
		tags[sh.Tag], paths[p] = true, true
	}
	return nil
}

// Seeded says the VM gets a NoCloud seed: cloud-init was asked for, or
// the guest must learn its shares (the seed's vmpod-shares and its
// vendor-data mounts).
func (s Spec) Seeded() bool { return s.CloudInit != nil || len(s.Shares) > 0 }
