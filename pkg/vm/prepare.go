package vm

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"net"
	"os"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/vmpod/vmpod/internal/nsthread"
	"github.com/vmpod/vmpod/pkg/convert"
	"github.com/vmpod/vmpod/pkg/host"
	"github.com/vmpod/vmpod/pkg/podnet"
	"github.com/vmpod/vmpod/pkg/vmspec"
)

// What a VM needs made on the node before its domain: the pod network
// taken over, block volume nodes, the cloud-init seed, and the overhead
// checked against the pod's limit. Front doors translate what they are
// handed (an OCI spec, a CRI request) into these calls.

// Network is the pod network a VM takes over.
type Network struct {
	// Netns is the pod's network namespace. Only the pod network's own
	// steps (podnet's) run in it, each on a thread of its own
	// (nsthread); the caller, the hypervisor and its threads stay in
	// theirs, the node's. QEMU's jailer enters it before it execs QEMU.
	Netns string
	// Interface is the pod interface CNI made (DefaultPodInterface when
	// empty); Tap the tap to make for the guest (TapName of the domain
	// when empty), a name free in the node's namespace, where it is made
	// and opened before it moves into the pod's.
	Interface, Tap string
	// ResolvConf is the pod's resolv.conf on the host, "" for none; the
	// guest gets its servers and search list by DHCP.
	ResolvConf string
	// Hostname is the pod's, for DHCP.
	Hostname string
}

// DefaultPodInterface is the pod interface CNI makes, unless a Network
// names another.
const DefaultPodInterface = vmspec.PodInterface

// TapName is the tap of the VM whose domain is named domain: "vmp" and 12
// hex digits of the name's SHA-256, unique on the node (the tap is made in
// the node's namespace, where every VM's tap is at first; a clash is
// refused, never shared).
func TapName(domain string) string {
	sum := sha256.Sum256([]byte(domain))
	return "vmp" + hex.EncodeToString(sum[:6])
}

func (n Network) withDefaults(domain string) Network {
	if n.Interface == "" {
		n.Interface = DefaultPodInterface
	}
	if n.Tap == "" {
		n.Tap = TapName(domain)
	}
	return n
}

// inspectNetwork reads the pod interface's identity (podnet.Inspect) in
// the pod's network namespace, with the DNS and hostname the guest is
// offered. A VM with NICs needs the pod's own namespace: in the node's,
// the interface would be the node's uplink.
func inspectNetwork(n Network) (podnet.Pod, error) {
	if n.Netns == "" {
		return podnet.Pod{}, fmt.Errorf("%s: the VM's network needs the pod's own network namespace, and this pod has none "+
			"(hostNetwork pods cannot run VMs; set vmpod.io/network: none for a VM without network): %w",
			vmspec.AnnotationNetwork, errdefs.ErrFailedPrecondition)
	}
	var pn podnet.Pod
	err := nsthread.InNetns(n.Netns, func() error {
		var err error
		if pn, err = podnet.Inspect(n.Interface); err != nil {
			return fmt.Errorf("pod network: %v: %w", err, errdefs.ErrFailedPrecondition)
		}
		pn.DNS, _ = podnet.ResolvConf(n.ResolvConf)
		pn.Hostname = n.Hostname
		return nil
	})
	return pn, err
}

// adoptMAC gives the pod interface the MAC of the guest a checkpoint
// holds (podnet.SetMAC), in the pod's network namespace.
func adoptMAC(n Network, mac net.HardwareAddr) error {
	if n.Netns == "" {
		return nil // inspectNetwork says why this cannot go on
	}
	return nsthread.InNetns(n.Netns, func() error {
		if err := podnet.SetMAC(n.Interface, mac); err != nil {
			return fmt.Errorf("pod network: %v: %w", err, errdefs.ErrInternal)
		}
		return nil
	})
}

// wireNetwork wires the tap, moved into the pod's namespace, to the pod
// interface there (podnet.Wire).
func wireNetwork(n Network, pn podnet.Pod, tap string) (*podnet.Attachment, error) {
	var a *podnet.Attachment
	err := nsthread.InNetns(n.Netns, func() error {
		var err error
		if a, err = podnet.Wire(pn, tap); err != nil {
			return fmt.Errorf("pod network: %v: %w", err, errdefs.ErrInternal)
		}
		return nil
	})
	return a, err
}

// BlockDevice is a block device a front door was handed for the VM: the
// path the container asked for, and the device's numbers.
type BlockDevice struct {
	Path         string
	Major, Minor int64
}

// MakeDevices makes, in the VM's dir, a node for each block volume of the
// spec, by device number (the path is the pod's choice, the numbers are
// the kubelet's), and returns them by volume name, with the nodes made so
// far for Held.Devices even on error. Devices no volume names are ignored.
func MakeDevices(l Layout, s vmspec.Spec, devs []BlockDevice) (map[string]string, []string, error) {
	if len(s.Volumes) == 0 {
		return nil, nil, nil
	}
	if err := os.MkdirAll(l.Devices(), 0o700); err != nil {
		return nil, nil, err
	}
	// The Spec names each volume from its device path (vmspec.Volume.Name).
	names := map[string]string{}
	for _, vol := range s.Volumes {
		names[vol.DevicePath] = vol.Name
	}
	vols := map[string]string{}
	var made []string
	for _, d := range devs {
		name, ok := names[d.Path]
		if !ok {
			continue
		}
		node := l.Device(name)
		if err := unix.Mknod(node, unix.S_IFBLK|0o600, int(unix.Mkdev(uint32(d.Major), uint32(d.Minor)))); err != nil {
			return nil, made, fmt.Errorf("block volume %s: %v: %w", d.Path, err, errdefs.ErrInternal)
		}
		made = append(made, node)
		vols[name] = node
	}
	return vols, made, nil
}

// WriteSeed builds the VM's NoCloud seed in the VM's dir, when it has one
// (vmspec.Spec.Seeded): the spec's cloud-init, from the annotations or
// from the cloud-init volume at volumeDir on the host ("" when the spec
// takes no volume), and what the guest mounts of its shares
// (ShareSeedFiles). instanceID and hostname are the NoCloud meta-data.
// Machine.Delete removes it with the dir.
func WriteSeed(l Layout, s vmspec.Spec, volumeDir, instanceID, hostname string) error {
	if !s.Seeded() {
		return nil
	}
	var ci vmspec.CloudInit // shares alone: empty user-data
	if s.CloudInit != nil {
		ci = *s.CloudInit
	}
	if ci.Volume != "" && volumeDir == "" {
		return fmt.Errorf("%s: %q is not mounted in the container: %w", vmspec.AnnotationCloudInitVolume, ci.Volume, errdefs.ErrInvalidArgument)
	}
	if instanceID == "" {
		instanceID = s.Name
	}
	files, err := NoCloudFiles(ci, volumeDir, instanceID, hostname)
	if err != nil {
		return err
	}
	maps.Copy(files, ShareSeedFiles(s.Shares))
	if err := WriteNoCloudISO(l.CloudInitISO(), files); err != nil {
		return fmt.Errorf("%w: %v", errdefs.ErrInternal, err)
	}
	return nil
}

// OverheadModel is the overhead model of the accelerator the VM will use
// on a node like h.
func OverheadModel(s vmspec.Spec, h host.Host) vmspec.Overhead {
	return vmspec.OverheadFor(s.Accel != vmspec.AccelTCG && h.HasAccel(host.AccelKVM))
}

// MemoryLimit is QEMU's memory limit on a node like h: the guest's RAM,
// the overhead of QEMU and the runtime, and the shares' part
// (vmspec.SharesOverheadBytes), all that the pod's limit holds. Most of
// the shares' part is their file servers', in a cgroup of their own
// under the pod's, but some is QEMU's (a device each, the kernel memory
// of its guest RAM in a memfd: 2.5 MiB a GiB, measured), and the pod's
// limit bounds the two together.
func MemoryLimit(s vmspec.Spec, h host.Host) uint64 {
	return s.MemoryBytes + OverheadModel(s, h).PodBytes(s.MemoryBytes, s.CeilingVCPUs(), len(s.Shares))
}

// CheckPodLimit refuses a VM that cannot fit its overhead, its shares'
// included, in podLimit, the pod cgroup's memory limit (the pod's limits
// plus the RuntimeClass overhead; 0: none): it would be OOM-killed at some
// point of its life.
func CheckPodLimit(s vmspec.Spec, h host.Host, podLimit uint64) error {
	return OverheadModel(s, h).CheckPodLimit(podLimit, s.MemoryBytes, s.CeilingVCPUs(), len(s.Shares))
}

// withDefaultRoom gives a VM whose pod set no vmpod.io/max-vcpus the
// node's default room to grow in vCPUs (convert.DefaultMaxVCPUs: up to
// the node's CPUs, at most upTo, where it can grow live), as far as the
// pod's memory limit (podLimit, 0: none) holds the overhead of the
// extra vCPUs: the default never makes a VM fail that would have run
// without it.
func withDefaultRoom(s vmspec.Spec, h host.Host, p convert.Paths, upTo int, podLimit uint64) vmspec.Spec {
	for n := convert.DefaultMaxVCPUs(s, h, p, upTo); n > s.VCPUs; n-- {
		roomy := s
		roomy.MaxVCPUs = n
		if CheckPodLimit(roomy, h, podLimit) == nil {
			return roomy
		}
	}
	return s
}
