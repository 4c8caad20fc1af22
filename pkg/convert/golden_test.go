package convert_test

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/vmpod/vmpod/internal/testenv/hostcaps"
	"github.com/vmpod/vmpod/pkg/convert"
	"github.com/vmpod/vmpod/pkg/host"
	"github.com/vmpod/vmpod/pkg/vmspec"
	. "github.com/vmpod/vmpod/pkg/vmspec/vmspectest"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

const state = "/var/lib/vmpod/pods/0123abcd"

// paths is what the runtime prepares for a VM whose image ships a kernel
// and a disk.
func paths() convert.Paths {
	return convert.Paths{
		Kernel:       state + "/rootfs/boot/vmlinux",
		Initrd:       state + "/rootfs/boot/initrd.img",
		RootDisk:     state + "/vm/disk.qcow2",
		BaseDisk:     state + "/rootfs/disk/disk.qcow2",
		BaseFormat:   "qcow2",
		Volumes:      map[string]string{"data": state + "/vm/dev/data", "logs": state + "/vm/dev/logs"},
		CloudInitISO: state + "/vm/cidata.iso",
		NVRAM:        state + "/vm/nvram.fd",
		Console:      state + "/vm/console.sock",
		GuestAgent:   state + "/vm/qga.sock",
		NICs:         map[string]convert.NIC{"eth0": {Tap: "vmpod0", MAC: "0a:58:0a:f4:00:05", MTU: 1450}},
		Emulator:     "/var/lib/vmpod/bin/vmpod-qemu",
		EmulatorEnv:  []string{"VMPOD_JAIL=" + state + "/jail.json"},
	}
}

// goldenCases are whole domains worth reading: each shows one way a pod
// becomes a VM.
func goldenCases() []struct {
	name  string
	host  string
	pod   *PodWrapper
	spec  func(*vmspec.Spec) // what FromPod does not make yet; nil for nothing
	paths func(*convert.Paths)
} {
	return []struct {
		name  string
		host  string
		pod   *PodWrapper
		spec  func(*vmspec.Spec)
		paths func(*convert.Paths)
	}{
		{
			name: "kernel-boot-tcg", host: hostcaps.TCG,
			pod:   MakePod("guest").CPU("2").Memory("256Mi").Annotation(vmspec.AnnotationKernelCmdline, "quiet"),
			paths: func(*convert.Paths) {},
		},
		{
			name: "disk-boot-uefi-kvm", host: hostcaps.KVM,
			pod: MakePod("db").Namespace("prod").CPU("4").Memory("8Gi").
				Annotation(vmspec.AnnotationFirmware, "uefi").
				Annotation(vmspec.AnnotationBoot, "disk").
				Annotation(vmspec.AnnotationSSHAuthorizedKeys, "ssh-ed25519 AAAAC3 admin").
				BlockVolume("data", "db-data", "/dev/data").
				BlockVolume("logs", "db-logs", "/dev/logs"),
			paths: func(*convert.Paths) {},
		},
		{
			name: "named-model-sata-kvm", host: hostcaps.KVM,
			pod: MakePod("legacy").Memory("2Gi").
				Annotation(vmspec.AnnotationCPUModel, "Skylake-Client-IBRS").
				Annotation(vmspec.AnnotationCPUFeatures, "aes,avx2").
				Annotation(vmspec.AnnotationDiskBus, "sata").
				Annotation(vmspec.AnnotationMachine, "pc"),
			paths: func(p *convert.Paths) { p.Kernel, p.Initrd = "", "" },
		},
		{
			name: "nested-virt-kvm", host: hostcaps.KVM,
			pod: MakePod("builder").CPU("2").Memory("4Gi").
				Annotation(vmspec.AnnotationNestedVirt, "on").
				Annotation(vmspec.AnnotationBoot, "disk"),
			paths: func(*convert.Paths) {},
		},
		{
			name: "scsi-volume-tcg", host: hostcaps.TCG,
			pod: MakePod("batch").Memory("512Mi").
				Annotation(vmspec.AnnotationDiskBus, "scsi").
				BlockVolume("data", "batch-data", "/dev/data"),
			paths: func(p *convert.Paths) { p.Kernel, p.Initrd = "", "" },
		},
		{
			// Filesystem volumes the guest mounts from virtio-fs shares
			// (issue 24): each served by a file server at its socket; the
			// guest's RAM then in a shared memfd.
			name: "volumes-virtiofs-tcg", host: hostcaps.TCG,
			pod: MakePod("app").Memory("256Mi"),
			spec: func(s *vmspec.Spec) {
				s.Shares = []vmspec.Share{vmspec.NewShare("/etc/config", true), vmspec.NewShare("/var/lib/app", false)}
			},
			paths: func(p *convert.Paths) {
				p.Shares = map[string]string{
					vmspec.ShareTag("/etc/config"):  state + "/vm/fs-0.sock",
					vmspec.ShareTag("/var/lib/app"): state + "/vm/fs-1.sock",
				}
			},
		},
		{
			// Room to grow live (issue 25): 1 of 4 vCPUs plugged, and a
			// virtio-mem device for 768 MiB more RAM, none of it plugged;
			// the guest's kernel told to online what is plugged later.
			name: "resizable-tcg", host: hostcaps.TCG,
			pod: MakePod("elastic").CPU("1").Memory("256Mi").
				Annotation(vmspec.AnnotationMaxVCPUs, "4").
				Annotation(vmspec.AnnotationMaxMemory, "1Gi"),
			paths: func(*convert.Paths) {},
		},
		{
			name: "resizable-kvm", host: hostcaps.KVM,
			pod: MakePod("elastic").CPU("2").Memory("1Gi").
				Annotation(vmspec.AnnotationBoot, "disk").
				Annotation(vmspec.AnnotationMaxVCPUs, "8").
				Annotation(vmspec.AnnotationMaxMemory, "4Gi"),
			paths: func(*convert.Paths) {},
		},
		{
			// Room to grow live in DIMMs (vmpod.io/memory-hotplug: dimm):
			// 2 slots of 128 MiB in <maxMemory>, no memory device at boot.
			name: "resizable-dimm-tcg", host: hostcaps.TCG,
			pod: MakePod("elastic").CPU("1").Memory("256Mi").
				Annotation(vmspec.AnnotationMaxMemory, "512Mi").
				Annotation(vmspec.AnnotationMemoryHotplug, "dimm"),
			paths: func(*convert.Paths) {},
		},
		{
			name: "headless-no-network-tcg", host: hostcaps.TCG,
			pod: MakePod("job").Memory("128Mi").
				Annotation(vmspec.AnnotationConsole, "off").
				Annotation(vmspec.AnnotationNetwork, "none"),
			paths: func(p *convert.Paths) { p.RootDisk = ""; p.GuestAgent = "" },
		},
	}
}

func TestGolden(t *testing.T) {
	for _, tc := range goldenCases() {
		t.Run(tc.name, func(t *testing.T) {
			got := render(t, tc.host, tc.pod, tc.spec, tc.paths)
			file := filepath.Join("testdata", tc.name+".xml")
			if *update {
				if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(file)
			if err != nil {
				t.Fatalf("%v (run go test ./pkg/convert -update)", err)
			}
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("%s (-want +got):\n%s", file, diff)
			}
		})
	}
}

func render(t testing.TB, hostName string, pod *PodWrapper, editSpec func(*vmspec.Spec), edit func(*convert.Paths)) string {
	t.Helper()
	s, err := vmspec.FromPod(pod.Obj())
	if err != nil {
		t.Fatal(err)
	}
	if editSpec != nil {
		editSpec(&s)
	}
	p := paths()
	edit(&p)
	d, err := convert.Domain(s, hostcaps.Golden[host.Host](t, hostName), p)
	if err != nil {
		t.Fatal(err)
	}
	xml, err := d.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return xml + "\n"
}
