package render

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containerd/errdefs"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/vmpod/vmpod/pkg/convert"
	"github.com/vmpod/vmpod/pkg/host"
	"github.com/vmpod/vmpod/pkg/vm"
	"github.com/vmpod/vmpod/pkg/vmspec"
)

// Options say what render assumes about the node and the image.
type Options struct {
	// RuntimeClasses are the RuntimeClass names that make a pod a VM pod.
	RuntimeClasses []string
	// StateRoot is where the runtime keeps pods' state dirs.
	StateRoot string
	// SandboxID names the pod's state dir (the runtime uses the pod
	// sandbox's id, which only the node knows); ContainerID the VM
	// container's bundle, where containerd mounts the image.
	SandboxID, ContainerID string
	// ImageKernel and ImageDisk say what the containerdisk ships.
	ImageKernel, ImageDisk bool
}

// DefaultOptions match the runtime's defaults and the test guest's image.
var DefaultOptions = Options{RuntimeClasses: vmspec.RuntimeClassNames(), StateRoot: "/var/lib/vmpod", ImageKernel: true, ImageDisk: true,
	SandboxID: "0123456789abcdef", ContainerID: "fedcba9876543210"}

// bundleRoot is where containerd (1.7 and 2.x, namespace k8s.io) makes a
// task's bundle, with the image mounted at rootfs/.
const bundleRoot = "/run/containerd/io.containerd.runtime.v2.task/k8s.io"

// DecodePod reads one Pod manifest (YAML or JSON). Unknown fields are an
// error, so a typo in the manifest is reported rather than ignored.
func DecodePod(r io.Reader) (*corev1.Pod, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	if docs := bytes.Split(data, []byte("\n---")); len(docs) > 1 && len(bytes.TrimSpace(docs[1])) > 0 {
		return nil, fmt.Errorf("manifest: holds more than one document; render takes one Pod: %w", errdefs.ErrInvalidArgument)
	}
	var pod corev1.Pod
	if err := yaml.UnmarshalStrict(data, &pod); err != nil {
		return nil, fmt.Errorf("manifest: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	if pod.Kind != "Pod" || pod.APIVersion != "v1" {
		return nil, fmt.Errorf("manifest: apiVersion %q kind %q: render takes a v1 Pod: %w",
			pod.APIVersion, pod.Kind, errdefs.ErrInvalidArgument)
	}
	return &pod, nil
}

// Pod returns the domain XML pod becomes on a node like h.
func Pod(pod *corev1.Pod, h host.Host, opts Options) (string, error) {
	if rc := pod.Spec.RuntimeClassName; rc == nil || !slices.Contains(opts.RuntimeClasses, *rc) {
		got := ""
		if rc != nil {
			got = *rc
		}
		return "", fmt.Errorf("spec.runtimeClassName: %q is not one of %s, so this pod is not a VM: %w",
			got, strings.Join(opts.RuntimeClasses, ", "), errdefs.ErrInvalidArgument)
	}
	s, err := vmspec.FromPod(pod)
	if err != nil {
		return "", err
	}
	layout := vm.PodLayout(opts.StateRoot, opts.SandboxID)
	rootfs := filepath.Join(bundleRoot, opts.ContainerID, "rootfs")
	var img vm.Image
	if opts.ImageKernel {
		img.Kernel = filepath.Join(rootfs, "boot", "vmlinux")
		img.Initrd = filepath.Join(rootfs, "boot", "initrd.img")
	}
	if opts.ImageDisk {
		img.Disk, img.DiskFormat = filepath.Join(rootfs, "disk", "disk.qcow2"), "qcow2"
	}
	p := layout.Paths(s, img, vm.JailerLink(opts.StateRoot))
	p.Volumes = map[string]string{}
	for _, v := range s.Volumes {
		p.Volumes[v.Name] = layout.Device(v.Name)
	}
	p.NICs = map[string]convert.NIC{}
	for i, n := range s.NICs {
		// The runtime uses the pod interface's MAC; render shows a stand-in.
		p.NICs[n.Name] = convert.NIC{Tap: fmt.Sprintf("vmpod%d", i), MAC: "0a:58:00:00:00:01"}
	}
	d, err := convert.Domain(s, h, p)
	if err != nil {
		return "", err
	}
	return d.Marshal()
}

// IsPodError reports whether err is the pod's fault (bad manifest,
// annotation or field, or something this node cannot run) rather than
// render's own failure.
func IsPodError(err error) bool {
	return errors.Is(err, errdefs.ErrInvalidArgument) || errors.Is(err, errdefs.ErrFailedPrecondition)
}
