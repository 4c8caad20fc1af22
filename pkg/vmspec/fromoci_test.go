package vmspec_test

import (
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/google/go-cmp/cmp"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/vmpod/vmpod/pkg/vmspec"
	. "github.com/vmpod/vmpod/pkg/vmspec/vmspectest"
)

// ociSpec is the container task's spec as containerd 2.4's CRI plugin
// writes it for MakePod("web") with limits cpu=2, memory=256Mi.
func ociSpec(extra map[string]string) *specs.Spec {
	quota, period, mem := int64(200000), uint64(100000), int64(256<<20)
	ann := map[string]string{
		vmspec.CRIContainerType:    vmspec.CRIContainerTypeCntr,
		vmspec.CRIContainerName:    "vm",
		vmspec.CRIImageName:        Image,
		vmspec.CRISandboxName:      "web",
		vmspec.CRISandboxNamespace: "default",
		vmspec.CRISandboxID:        "0123abcd",
		vmspec.CRISandboxUID:       podUID,
	}
	for k, v := range extra {
		ann[k] = v
	}
	return &specs.Spec{
		Annotations: ann,
		Linux: &specs.Linux{
			Resources: &specs.LinuxResources{
				CPU:    &specs.LinuxCPU{Quota: &quota, Period: &period},
				Memory: &specs.LinuxMemory{Limit: &mem},
			},
			Devices: []specs.LinuxDevice{
				{Path: "/dev/data", Type: "b", Major: 7, Minor: 3},
				{Path: "/dev/fuse", Type: "c", Major: 10, Minor: 229},
			},
		},
		Mounts: []specs.Mount{
			{Destination: "/cloud-init", Source: "/var/lib/kubelet/pods/" + podUID + "/volumes/kubernetes.io~configmap/seed/", Type: "bind"},
			{Destination: "/etc/hosts", Source: "/var/lib/containerd/sandboxes/x/hosts", Type: "bind"},
		},
	}
}

func TestFromOCI(t *testing.T) {
	want := defaults()
	want.VCPUs = 2
	want.Volumes = []vmspec.Volume{{Name: "data", DevicePath: "/dev/data", Serial: "data"}}
	want.Firmware = vmspec.FirmwareUEFI
	want.CloudInit = &vmspec.CloudInit{Volume: "seed", VolumeMountPath: "/cloud-init"}

	got, err := vmspec.FromOCI(ociSpec(map[string]string{
		vmspec.AnnotationFirmware:        "uefi",
		vmspec.AnnotationCloudInitVolume: "seed",
	}), vmspec.MountRules{})
	if err != nil {
		t.Fatalf("FromOCI: %v", err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("FromOCI (-want +got):\n%s", diff)
	}
}

// The same pod must mean the same VM to the scheduler (FromPod) and to the
// shim (FromOCI).
func TestFromOCIAgreesWithFromPod(t *testing.T) {
	pod := MakePod("web").CPU("2").Annotation(vmspec.AnnotationFirmware, "uefi").
		ConfigMapVolume("seed", "web-seed", "/cloud-init").
		Annotation(vmspec.AnnotationCloudInitVolume, "seed").
		BlockVolume("data", "web-data", "/dev/data").Obj()
	fromPod, err := vmspec.FromPod(pod)
	if err != nil {
		t.Fatal(err)
	}
	fromOCI, err := vmspec.FromOCI(ociSpec(pod.Annotations), vmspec.MountRules{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(fromPod, fromOCI); diff != "" {
		t.Errorf("FromPod vs FromOCI (-pod +oci):\n%s", diff)
	}
}

func TestFromOCIErrors(t *testing.T) {
	noMem := ociSpec(nil)
	noMem.Linux.Resources.Memory = nil
	// What containerd writes for a privileged container: every capability,
	// every host device, no masked paths.
	priv := ociSpec(nil)
	priv.Process = &specs.Process{Capabilities: &specs.LinuxCapabilities{Bounding: []string{"CAP_CHOWN", "CAP_SYS_ADMIN", "CAP_SYS_MODULE"}}}
	priv.Linux.Devices = append(priv.Linux.Devices, specs.LinuxDevice{Path: "/dev/sda", Type: "b", Major: 8})
	tests := []struct {
		name string
		spec *specs.Spec
		want string
	}{
		{"nil", nil, "oci spec: is nil"},
		{"sandbox task", ociSpec(map[string]string{vmspec.CRIContainerType: "sandbox"}), "io.kubernetes.cri.container-type"},
		{"bad annotation", ociSpec(map[string]string{vmspec.AnnotationFirmware: "efi"}), `vmpod.io/firmware: "efi" is not one of bios, uefi`},
		{"no memory limit", noMem, "limits.memory: required"},
		{"privileged", priv, `securityContext.privileged: "true": a VM pod cannot be privileged`},
		{"cloud-init volume not mounted", ociSpec(map[string]string{vmspec.AnnotationCloudInitVolume: "other"}),
			`vmpod.io/cloud-init-volume: "other": no configMap or secret volume of that name is mounted`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := vmspec.FromOCI(tt.spec, vmspec.MountRules{})
			if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("FromOCI error = %v, want InvalidArgument containing %q", err, tt.want)
			}
		})
	}
}

// Without CRI annotations (ctr run) the VM still gets a name.
func TestFromOCIWithoutCRI(t *testing.T) {
	s := ociSpec(nil)
	s.Annotations = nil
	s.Mounts = nil // ctr run mounts no pod volumes
	s.Hostname = "box"
	got, err := vmspec.FromOCI(s, vmspec.MountRules{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != "default_box" {
		t.Errorf("Name = %q, want default_box", got.Name)
	}
}
