package vmspec_test

import (
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/google/go-cmp/cmp"

	"github.com/vmpod/vmpod/pkg/vmspec"
	. "github.com/vmpod/vmpod/pkg/vmspec/vmspectest"
)

// defaults is the Spec of MakePod("web") with nothing else set.
func defaults() vmspec.Spec {
	return vmspec.Spec{
		Name:        "default_web",
		Image:       Image,
		VCPUs:       1,
		MemoryBytes: 256 << 20,
		Accel:       vmspec.AccelAuto,
		CPU:         vmspec.CPU{Model: vmspec.CPUModelAuto},
		Firmware:    vmspec.FirmwareBIOS,
		Machine:     "q35",
		Boot:        vmspec.Boot{Source: vmspec.BootAuto},
		DiskBus:     vmspec.DiskBusVirtio,
		NICs:        []vmspec.NIC{{Name: "eth0"}},
		Console:     true,
	}
}

func TestFromPod(t *testing.T) {
	tests := []struct {
		name string
		pod  *PodWrapper
		want func(*vmspec.Spec)
	}{
		{name: "defaults", pod: MakePod("web"), want: func(*vmspec.Spec) {}},
		{
			name: "cpu rounds up, memory rounds down to MiB",
			pod:  MakePod("web").CPU("1500m").Memory("1G"),
			want: func(s *vmspec.Spec) { s.VCPUs = 2; s.MemoryBytes = 953 << 20 },
		},
		{
			name: "namespace",
			pod:  MakePod("web").Namespace("team-a"),
			want: func(s *vmspec.Spec) { s.Name = "team-a_web" },
		},
		{
			name: "every enum annotation",
			pod: MakePod("web").
				Annotation(vmspec.AnnotationAccel, "kvm").
				Annotation(vmspec.AnnotationFirmware, "uefi").
				Annotation(vmspec.AnnotationBoot, "disk").
				Annotation(vmspec.AnnotationDiskBus, "sata").
				Annotation(vmspec.AnnotationConsole, "off").
				Annotation(vmspec.AnnotationNetwork, "none").
				Annotation(vmspec.AnnotationNestedVirt, "on"),
			want: func(s *vmspec.Spec) {
				s.Accel = vmspec.AccelKVM
				s.Firmware = vmspec.FirmwareUEFI
				s.Boot.Source = vmspec.BootDisk
				s.DiskBus = vmspec.DiskBusSATA
				s.Console = false
				s.NICs = nil
				s.CPU.Nested = true
			},
		},
		{
			name: "nested virtualisation may require vmx",
			pod: MakePod("web").
				Annotation(vmspec.AnnotationNestedVirt, "on").
				Annotation(vmspec.AnnotationCPUFeatures, "vmx"),
			want: func(s *vmspec.Spec) { s.CPU.Nested, s.CPU.Features = true, []string{"vmx"} },
		},
		{
			name: "cpu model and features are sorted and deduplicated",
			pod: MakePod("web").
				Annotation(vmspec.AnnotationCPUModel, "Skylake-Client-IBRS").
				Annotation(vmspec.AnnotationCPUFeatures, " avx2, aes,avx2,,sse4.2 "),
			want: func(s *vmspec.Spec) {
				s.CPU = vmspec.CPU{Model: "Skylake-Client-IBRS", Features: []string{"aes", "avx2", "sse4.2"}}
			},
		},
		{
			name: "machine and kernel command line",
			pod: MakePod("web").
				Annotation(vmspec.AnnotationMachine, "pc-q35-7.2").
				Annotation(vmspec.AnnotationKernelCmdline, "  quiet loglevel=3 "),
			want: func(s *vmspec.Spec) { s.Machine = "pc-q35-7.2"; s.Boot.Cmdline = "quiet loglevel=3" },
		},
		{
			name: "live-resize maxima",
			pod: MakePod("web").CPU("1").Memory("256Mi").
				Annotation(vmspec.AnnotationMaxVCPUs, "4").
				Annotation(vmspec.AnnotationMaxMemory, "1Gi"),
			want: func(s *vmspec.Spec) { s.MaxVCPUs = 4; s.MaxMemoryBytes = 1 << 30 },
		},
		{
			name: "memory added live in DIMMs",
			pod: MakePod("web").CPU("1").Memory("256Mi").
				Annotation(vmspec.AnnotationMaxMemory, "768Mi").
				Annotation(vmspec.AnnotationMemoryHotplug, "dimm"),
			want: func(s *vmspec.Spec) { s.MaxMemoryBytes = 768 << 20; s.MemoryHotplug = vmspec.MemoryHotplugDIMM },
		},
		{
			name: "maxima equal to the limits leave no room",
			pod: MakePod("web").CPU("2").Memory("512Mi").
				Annotation(vmspec.AnnotationMaxVCPUs, "2").
				Annotation(vmspec.AnnotationMaxMemory, "512Mi"),
			want: func(s *vmspec.Spec) {
				s.VCPUs, s.MemoryBytes, s.MaxVCPUs, s.MaxMemoryBytes = 2, 512<<20, 2, 512<<20
			},
		},
		{
			name: "inline cloud-init",
			pod: MakePod("web").
				Annotation(vmspec.AnnotationCloudInitUserData, "#cloud-config\npassword: x\n").
				Annotation(vmspec.AnnotationSSHAuthorizedKeys, "# mine\nssh-ed25519 AAAAC3 me@laptop\n\necdsa-sha2-nistp256 AAAAE2 ci\n"),
			want: func(s *vmspec.Spec) {
				s.CloudInit = &vmspec.CloudInit{
					UserData: "#cloud-config\npassword: x\n",
					SSHKeys:  []string{"ssh-ed25519 AAAAC3 me@laptop", "ecdsa-sha2-nistp256 AAAAE2 ci"},
				}
			},
		},
		{
			name: "cloud-init from a mounted configMap",
			pod: MakePod("web").
				ConfigMapVolume("seed", "web-seed", "/cloud-init").
				Annotation(vmspec.AnnotationCloudInitVolume, "seed"),
			want: func(s *vmspec.Spec) {
				s.CloudInit = &vmspec.CloudInit{Volume: "seed", VolumeMountPath: "/cloud-init"}
			},
		},
		{
			name: "cloud-init from the least whole mount of the volume; its other mounts are shares",
			pod: MakePod("web").
				ConfigMapVolume("seed", "web-seed", "/seed").
				VolumeMount("seed", "/a/user-data", "user-data").
				VolumeMount("seed", "/etc/seed", "").
				Annotation(vmspec.AnnotationCloudInitVolume, "seed"),
			want: func(s *vmspec.Spec) {
				s.CloudInit = &vmspec.CloudInit{Volume: "seed", VolumeMountPath: "/etc/seed"}
				s.Shares = []vmspec.Share{vmspec.NewShare("/a/user-data", true), vmspec.NewShare("/seed", true)}
			},
		},
		{
			name: "a cpu limit of 0 is no limit, as on the node",
			pod:  MakePod("web").CPU("0"),
			want: func(*vmspec.Spec) {},
		},
		{
			name: "block volumes keep pod order, serial comes from the device path",
			pod: MakePod("web").
				BlockVolume("data", "web-data", "/dev/data").
				BlockVolume("a-very-long-volume-name-indeed", "c", "/dev/xvdb").
				BlockVolume("nested", "d", "/dev/disks/data").
				BlockVolume("long", "e", "/dev/a-device-name-of-21ch"),
			want: func(s *vmspec.Spec) {
				s.Volumes = []vmspec.Volume{
					{Name: "data", DevicePath: "/dev/data", Serial: "data"},
					{Name: "xvdb", DevicePath: "/dev/xvdb", Serial: "xvdb"},
					// Not a plain name under /dev: base name, '_' and a hash of the path.
					{Name: "data_deebec8c", DevicePath: "/dev/disks/data", Serial: "data_deebec8c"},
					{Name: "a-device-na_79e3777f", DevicePath: "/dev/a-device-name-of-21ch", Serial: "a-device-na_79e3777f"},
				}
			},
		},
		{
			name: "annotations outside vmpod.io/ are ignored",
			pod:  MakePod("web").Annotation("example.com/firmware", "efi").Annotation("vmpod.io", "x"),
			want: func(*vmspec.Spec) {},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := defaults()
			want.Name = vmspec.DomainName(tt.pod.Pod.Namespace, "web")
			tt.want(&want)
			got, err := vmspec.FromPod(tt.pod.Obj())
			if err != nil {
				t.Fatalf("FromPod: %v", err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("FromPod (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFromPodErrors(t *testing.T) {
	tests := []struct {
		name string
		pod  *PodWrapper
		// want are substrings of the error, each naming a field and, for
		// enums, the accepted values.
		want []string
	}{
		{"privileged", MakePod("web").Privileged(),
			[]string{`spec.containers[0].securityContext.privileged: "true": a VM pod cannot be privileged`}},
		{"bad firmware", MakePod("web").Annotation(vmspec.AnnotationFirmware, "efi"),
			[]string{`vmpod.io/firmware: "efi" is not one of bios, uefi`}},
		{"bad accel", MakePod("web").Annotation(vmspec.AnnotationAccel, "hvf"),
			[]string{`vmpod.io/accel: "hvf" is not one of auto, kvm, tcg`}},
		{"bad disk bus", MakePod("web").Annotation(vmspec.AnnotationDiskBus, "ide"),
			[]string{`vmpod.io/disk-bus: "ide" is not one of virtio, sata, scsi`}},
		{"bad console", MakePod("web").Annotation(vmspec.AnnotationConsole, "true"),
			[]string{`vmpod.io/console: "true" is not one of on, off`}},
		{"bad nested-virt", MakePod("web").Annotation(vmspec.AnnotationNestedVirt, "true"),
			[]string{`vmpod.io/nested-virt: "true" is not one of off, on`}},
		{"vmx without nested-virt", MakePod("web").Annotation(vmspec.AnnotationCPUFeatures, "aes,vmx"),
			[]string{`vmpod.io/cpu-features: "vmx": nested virtualisation is off: ask for it with vmpod.io/nested-virt: on (accepted values: off, on)`}},
		{"svm with nested-virt off", MakePod("web").
			Annotation(vmspec.AnnotationCPUFeatures, "svm").Annotation(vmspec.AnnotationNestedVirt, "off"),
			[]string{`vmpod.io/cpu-features: "svm": nested virtualisation is off`}},
		{"max-vcpus not a number", MakePod("web").Annotation(vmspec.AnnotationMaxVCPUs, "two"),
			[]string{`vmpod.io/max-vcpus: "two": want a whole number of vCPUs from 1 to 255`}},
		{"max-vcpus beyond QEMU", MakePod("web").Annotation(vmspec.AnnotationMaxVCPUs, "300"),
			[]string{`vmpod.io/max-vcpus: "300": want a whole number of vCPUs from 1 to 255`}},
		{"max-vcpus below the cpu limit", MakePod("web").CPU("3").Memory("256Mi").Annotation(vmspec.AnnotationMaxVCPUs, "2"),
			[]string{`vmpod.io/max-vcpus: "2": is below the VM's 3 vCPUs (spec.containers[0].resources.limits.cpu); want at least that`}},
		{"max-memory not a quantity", MakePod("web").Annotation(vmspec.AnnotationMaxMemory, "lots"),
			[]string{`vmpod.io/max-memory: "lots": want a memory quantity such as 1Gi or 512Mi`}},
		{"max-memory too small", MakePod("web").Annotation(vmspec.AnnotationMaxMemory, "1Mi"),
			[]string{`vmpod.io/max-memory: "1Mi": want from 64Mi to 1Ti of guest RAM`}},
		{"max-memory below the memory limit", MakePod("web").CPU("1").Memory("512Mi").Annotation(vmspec.AnnotationMaxMemory, "256Mi"),
			[]string{`vmpod.io/max-memory: "256Mi": is below the VM's 512Mi (spec.containers[0].resources.limits.memory); want at least that`}},
		{"max-memory off the 2Mi block", MakePod("web").CPU("1").Memory("256Mi").Annotation(vmspec.AnnotationMaxMemory, "259Mi"),
			[]string{`vmpod.io/max-memory: "259Mi": must exceed the VM's 256Mi (spec.containers[0].resources.limits.memory) by a multiple of 2Mi`}},
		{"bad memory hotplug", MakePod("web").Annotation(vmspec.AnnotationMemoryHotplug, "acpi"),
			[]string{`vmpod.io/memory-hotplug: "acpi" is not one of virtio-mem, dimm`}},
		{"dimm without max-memory", MakePod("web").Annotation(vmspec.AnnotationMemoryHotplug, "dimm"),
			[]string{`vmpod.io/memory-hotplug: "dimm": DIMMs add RAM up to vmpod.io/max-memory, which is unset`}},
		{"dimm with max-memory at the memory limit", MakePod("web").Memory("256Mi").
			Annotation(vmspec.AnnotationMemoryHotplug, "dimm").Annotation(vmspec.AnnotationMaxMemory, "256Mi"),
			[]string{`vmpod.io/memory-hotplug: "dimm": DIMMs add RAM up to vmpod.io/max-memory`}},
		{"dimm room off the 128Mi DIMM", MakePod("web").Memory("256Mi").
			Annotation(vmspec.AnnotationMemoryHotplug, "dimm").Annotation(vmspec.AnnotationMaxMemory, "450Mi"),
			[]string{`vmpod.io/max-memory: "450Mi": with vmpod.io/memory-hotplug: dimm, must exceed the VM's 256Mi (spec.containers[0].resources.limits.memory) by a multiple of 128Mi, the size of each DIMM`}},
		{"dimm room beyond 32 DIMMs of 128Mi takes 256Mi DIMMs", MakePod("web").Memory("1Gi").
			Annotation(vmspec.AnnotationMemoryHotplug, "dimm").Annotation(vmspec.AnnotationMaxMemory, "5248Mi"),
			[]string{`vmpod.io/max-memory: "5248Mi": with vmpod.io/memory-hotplug: dimm, must exceed the VM's 1024Mi (spec.containers[0].resources.limits.memory) by a multiple of 256Mi`}},
		{"bad boot", MakePod("web").Annotation(vmspec.AnnotationBoot, "pxe"),
			[]string{`vmpod.io/boot: "pxe" is not one of auto, kernel, disk`}},
		{"bad network", MakePod("web").Annotation(vmspec.AnnotationNetwork, "host"),
			[]string{`vmpod.io/network: "host" is not one of pod, none`}},
		{"unknown annotation lists the known ones", MakePod("web").Annotation("vmpod.io/firmwre", "uefi"),
			[]string{`vmpod.io/firmwre: "" is not one of vmpod.io/accel,`, "unknown vmpod annotation"}},
		{"cpu model that is a path", MakePod("web").Annotation(vmspec.AnnotationCPUModel, "/dev/kvm"),
			[]string{`vmpod.io/cpu-model: "/dev/kvm"`}},
		{"machine that is a path", MakePod("web").Annotation(vmspec.AnnotationMachine, "../../etc/passwd"),
			[]string{`vmpod.io/machine: "../../etc/passwd"`}},
		{"bad cpu feature", MakePod("web").Annotation(vmspec.AnnotationCPUFeatures, "avx2,AVX 512"),
			[]string{`vmpod.io/cpu-features: "AVX 512"`}},
		{"passthrough under tcg", MakePod("web").
			Annotation(vmspec.AnnotationAccel, "tcg").Annotation(vmspec.AnnotationCPUModel, "host-passthrough"),
			[]string{`vmpod.io/cpu-model: "host-passthrough": needs KVM, and vmpod.io/accel is tcg`}},
		{"multi-line cmdline", MakePod("web").Annotation(vmspec.AnnotationKernelCmdline, "quiet\ninit=/bin/sh"),
			[]string{"vmpod.io/kernel-cmdline: contains a control character"}},
		{"long cmdline", MakePod("web").Annotation(vmspec.AnnotationKernelCmdline, strings.Repeat("a", 1793)),
			[]string{"vmpod.io/kernel-cmdline: longer than 1792 bytes"}},
		{"cmdline with disk boot", MakePod("web").
			Annotation(vmspec.AnnotationBoot, "disk").Annotation(vmspec.AnnotationKernelCmdline, "quiet"),
			[]string{`vmpod.io/kernel-cmdline: "quiet": applies to direct kernel boot only`}},
		{"bad ssh key", MakePod("web").Annotation(vmspec.AnnotationSSHAuthorizedKeys, "hunter2"),
			[]string{`vmpod.io/ssh-authorized-keys: "hunter2": want one OpenSSH public key per line`}},
		{"cloud-init volume missing", MakePod("web").Annotation(vmspec.AnnotationCloudInitVolume, "seed"),
			[]string{`vmpod.io/cloud-init-volume: "seed": no volume of that name`}},
		{"cloud-init volume not mounted", MakePod("web").ConfigMapVolume("seed", "s", "").
			Annotation(vmspec.AnnotationCloudInitVolume, "seed"),
			[]string{`vmpod.io/cloud-init-volume: "seed": the container must mount the volume`}},
		{"cloud-init volume mounted only in part", MakePod("web").ConfigMapVolume("seed", "s", "").
			VolumeMount("seed", "/ci/user-data", "user-data").Annotation(vmspec.AnnotationCloudInitVolume, "seed"),
			[]string{`vmpod.io/cloud-init-volume: "seed": the container must mount the whole volume (volumeMounts, without subPath)`}},
		{"two devices, one serial", MakePod("web").BlockVolume("a", "a", "/dev/data").BlockVolume("b", "b", "/dev/data"),
			[]string{`spec.containers[0].volumeDevices[1].devicePath: "/dev/data": gives the disk serial "data" of an earlier device`}},
		{"cloud-init volume is a pvc", MakePod("web").BlockVolume("seed", "c", "/dev/seed").
			Annotation(vmspec.AnnotationCloudInitVolume, "seed"),
			[]string{`vmpod.io/cloud-init-volume: "seed": the volume must be a configMap or a secret`}},
		{"cloud-init volume and inline", MakePod("web").ConfigMapVolume("seed", "s", "/ci").
			Annotation(vmspec.AnnotationCloudInitVolume, "seed").Annotation(vmspec.AnnotationCloudInitUserData, "#cloud-config"),
			[]string{`vmpod.io/cloud-init-volume: "seed": give cloud-init data either in a volume or inline`}},
		{"no memory limit", MakePod("web").Memory(""),
			[]string{"spec.containers[0].resources.limits.memory: required: it is the guest's RAM"}},
		{"too little memory", MakePod("web").Memory("32Mi"),
			[]string{`spec.containers[0].resources.limits.memory: "32Mi": want at least 64Mi`}},
		{"absurd memory (overflowed the overhead sums)", MakePod("web").Memory("8Ei"),
			[]string{`spec.containers[0].resources.limits.memory: `, `at most 1Ti of guest RAM`}},
		{"memory above int64 (read as 1Gi before)", MakePod("web").Memory("18446744074783293440"),
			[]string{`spec.containers[0].resources.limits.memory: `, `at most 1Ti of guest RAM`}},
		{"memory 1e30 (read as 0 before)", MakePod("web").Memory("1e30"),
			[]string{`spec.containers[0].resources.limits.memory: `, `at most 1Ti of guest RAM`}},
		{"cpu above int64 millis (read as 1 vCPU before)", MakePod("web").CPU("18446744073709552"),
			[]string{`spec.containers[0].resources.limits.cpu: "18446744073709552": at most 255 vCPUs`}},
		{"memory 1e95555594 (minutes of big-number arithmetic before)", MakePod("web").Memory("1e95555594"),
			[]string{`spec.containers[0].resources.limits.memory: `, `at most 1Ti of guest RAM`}},
		{"cpu 1e95555594", MakePod("web").CPU("1e95555594"),
			[]string{`spec.containers[0].resources.limits.cpu: `, `at most 255 vCPUs`}},
		{"cpu 8Ei", MakePod("web").CPU("8Ei"),
			[]string{`spec.containers[0].resources.limits.cpu: `, `at most 255 vCPUs`}},
		{"hostPath as a block volume", MakePod("web").HostPathBlockVolume("root", "/dev/sda", "/dev/xvda"),
			[]string{`spec.containers[0].volumeDevices[0].name: "root": the volume must be a persistentVolumeClaim or an ephemeral volume`}},
		{"too many cpus", MakePod("web").CPU("300"),
			[]string{`spec.containers[0].resources.limits.cpu: "300": at most 255 vCPUs`}},
		{"two containers", MakePod("web").Container("sidecar", "busybox"),
			[]string{"spec.containers: a VM pod has exactly one container, the VM; found 2"}},
		{"init container", MakePod("web").InitContainer("init", "busybox"),
			[]string{"spec.initContainers: a VM pod has no init containers; found 1"}},
		{"every problem at once", MakePod("web").Memory("").
			Annotation(vmspec.AnnotationFirmware, "efi").Annotation(vmspec.AnnotationAccel, "hvf"),
			[]string{"vmpod.io/firmware", "vmpod.io/accel", "limits.memory"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := vmspec.FromPod(tt.pod.Obj())
			if err == nil {
				t.Fatalf("FromPod: no error, want one containing %q", tt.want)
			}
			if !errdefs.IsInvalidArgument(err) {
				t.Errorf("FromPod error is not InvalidArgument: %v", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("FromPod error = %q, want it to contain %q", err, w)
				}
			}
		})
	}
}

func TestFromPodNil(t *testing.T) {
	if _, err := vmspec.FromPod(nil); !errdefs.IsInvalidArgument(err) {
		t.Errorf("FromPod(nil) = %v, want InvalidArgument", err)
	}
}
