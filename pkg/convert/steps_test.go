package convert

import (
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/google/go-cmp/cmp"
	"libvirt.org/go/libvirtxml"

	"github.com/vmpod/vmpod/pkg/host"
	"github.com/vmpod/vmpod/pkg/vmspec"
)

var (
	tcgHost = host.Host{
		Arch: "x86_64", Emulator: "/usr/bin/qemu-system-x86_64", Accels: []host.Accel{host.AccelTCG},
		Machines: []string{"pc", "q35"}, MaxVCPUs: 255, CPUModels: []string{"EPYC", "qemu64"},
		HostModel: host.CPU{Model: "EPYC"},
		Firmware:  host.Firmware{QBoot: "/usr/share/qemu/qboot.rom", UEFICode: "/ovmf/CODE.fd", UEFIVars: "/ovmf/VARS.fd"},
	}
	kvmHost = func() host.Host {
		h := tcgHost
		h.Accels = []host.Accel{host.AccelKVM, host.AccelTCG}
		h.HostPassthrough = true
		h.Firmware = host.Firmware{}
		return h
	}()
)

// noNesting is what a CPU vmpod names has unless the pod asks for nesting.
var noNesting = []libvirtxml.DomainCPUFeature{{Policy: "disable", Name: "svm"}, {Policy: "disable", Name: "vmx"}}

// Each step is run on an empty domain, and the whole domain it leaves is
// compared: a step must touch only its own area.
func TestSteps(t *testing.T) {
	port := uint(0)
	tests := []struct {
		name  string
		apply func(*libvirtxml.Domain) error
		want  libvirtxml.Domain
	}{
		{
			name:  "identity",
			apply: func(d *libvirtxml.Domain) error { return identity(d, "ns_pod") },
			want:  libvirtxml.Domain{Name: "ns_pod"},
		},
		{
			name:  "accel and machine, kvm",
			apply: func(d *libvirtxml.Domain) error { return accelMachine(d, host.AccelKVM, "q35", kvmHost) },
			want: libvirtxml.Domain{
				Type:    "kvm",
				OS:      &libvirtxml.DomainOS{Type: &libvirtxml.DomainOSType{Type: "hvm", Arch: "x86_64", Machine: "q35"}},
				Devices: &libvirtxml.DomainDeviceList{Emulator: "/usr/bin/qemu-system-x86_64"},
			},
		},
		{
			name:  "accel and machine, tcg caps the translation cache",
			apply: func(d *libvirtxml.Domain) error { return accelMachine(d, host.AccelTCG, "pc", tcgHost) },
			want: libvirtxml.Domain{
				Type:     "qemu",
				OS:       &libvirtxml.DomainOS{Type: &libvirtxml.DomainOSType{Type: "hvm", Arch: "x86_64", Machine: "pc"}},
				Devices:  &libvirtxml.DomainDeviceList{Emulator: "/usr/bin/qemu-system-x86_64"},
				Features: &libvirtxml.DomainFeatureList{TCG: &libvirtxml.DomainFeatureTCG{TBCache: &libvirtxml.DomainFeatureTCGTBCache{Unit: "MiB", Size: 32}}},
			},
		},
		{
			name: "cpu auto under kvm is host-passthrough",
			apply: func(d *libvirtxml.Domain) error {
				return cpu(d, vmspec.CPU{Model: "auto"}, 2, 0, host.AccelKVM, kvmHost)
			},
			want: libvirtxml.Domain{
				VCPU: &libvirtxml.DomainVCPU{Placement: "static", Value: 2},
				CPU: &libvirtxml.DomainCPU{Mode: "host-passthrough", Check: "none", Migratable: "off",
					Topology: &libvirtxml.DomainCPUTopology{Sockets: 1, Dies: 1, Cores: 2, Threads: 1},
					Features: noNesting},
			},
		},
		{
			name: "cpu host-passthrough with nesting keeps vmx and svm",
			apply: func(d *libvirtxml.Domain) error {
				return cpu(d, vmspec.CPU{Model: "host-passthrough", Nested: true}, 2, 0, host.AccelKVM, kvmHost)
			},
			want: libvirtxml.Domain{
				VCPU: &libvirtxml.DomainVCPU{Placement: "static", Value: 2},
				CPU: &libvirtxml.DomainCPU{Mode: "host-passthrough", Check: "none", Migratable: "off",
					Topology: &libvirtxml.DomainCPUTopology{Sockets: 1, Dies: 1, Cores: 2, Threads: 1}},
			},
		},
		{
			name: "cpu host-model",
			apply: func(d *libvirtxml.Domain) error {
				return cpu(d, vmspec.CPU{Model: "host-model"}, 1, 0, host.AccelKVM, kvmHost)
			},
			want: libvirtxml.Domain{
				VCPU: &libvirtxml.DomainVCPU{Placement: "static", Value: 1},
				CPU: &libvirtxml.DomainCPU{Mode: "host-model",
					Topology: &libvirtxml.DomainCPUTopology{Sockets: 1, Dies: 1, Cores: 1, Threads: 1},
					Features: noNesting},
			},
		},
		{
			name: "cpu auto under tcg with nesting is QEMU's default model still",
			apply: func(d *libvirtxml.Domain) error {
				return cpu(d, vmspec.CPU{Model: "auto", Nested: true}, 1, 0, host.AccelTCG, tcgHost)
			},
			want: libvirtxml.Domain{
				VCPU: &libvirtxml.DomainVCPU{Placement: "static", Value: 1},
				CPU:  &libvirtxml.DomainCPU{Topology: &libvirtxml.DomainCPUTopology{Sockets: 1, Dies: 1, Cores: 1, Threads: 1}},
			},
		},
		{
			name: "cpu auto under tcg is QEMU's default model",
			apply: func(d *libvirtxml.Domain) error {
				return cpu(d, vmspec.CPU{Model: "auto"}, 1, 0, host.AccelTCG, tcgHost)
			},
			want: libvirtxml.Domain{
				VCPU: &libvirtxml.DomainVCPU{Placement: "static", Value: 1},
				CPU:  &libvirtxml.DomainCPU{Topology: &libvirtxml.DomainCPUTopology{Sockets: 1, Dies: 1, Cores: 1, Threads: 1}},
			},
		},
		{
			name: "cpu features under tcg need a model",
			apply: func(d *libvirtxml.Domain) error {
				return cpu(d, vmspec.CPU{Model: "auto", Features: []string{"aes"}}, 1, 0, host.AccelTCG, tcgHost)
			},
			want: libvirtxml.Domain{
				VCPU: &libvirtxml.DomainVCPU{Placement: "static", Value: 1},
				CPU: &libvirtxml.DomainCPU{Mode: "custom", Match: "exact",
					Model:    &libvirtxml.DomainCPUModel{Value: "qemu64", Fallback: "forbid"},
					Features: append([]libvirtxml.DomainCPUFeature{{Policy: "require", Name: "aes"}}, noNesting...),
					Topology: &libvirtxml.DomainCPUTopology{Sockets: 1, Dies: 1, Cores: 1, Threads: 1}},
			},
		},
		{
			name: "cpu named model",
			apply: func(d *libvirtxml.Domain) error {
				return cpu(d, vmspec.CPU{Model: "EPYC"}, 1, 0, host.AccelTCG, tcgHost)
			},
			want: libvirtxml.Domain{
				VCPU: &libvirtxml.DomainVCPU{Placement: "static", Value: 1},
				CPU: &libvirtxml.DomainCPU{Mode: "custom", Match: "exact", Check: "partial",
					Model:    &libvirtxml.DomainCPUModel{Value: "EPYC", Fallback: "forbid"},
					Topology: &libvirtxml.DomainCPUTopology{Sockets: 1, Dies: 1, Cores: 1, Threads: 1},
					Features: noNesting},
			},
		},
		{
			name:  "memory without balloon",
			apply: func(d *libvirtxml.Domain) error { return memory(d, 256<<20) },
			want: libvirtxml.Domain{
				Memory:        &libvirtxml.DomainMemory{Value: 262144, Unit: "KiB"},
				CurrentMemory: &libvirtxml.DomainCurrentMemory{Value: 262144, Unit: "KiB"},
				Devices:       &libvirtxml.DomainDeviceList{MemBalloon: &libvirtxml.DomainMemBalloon{Model: "none"}},
			},
		},
		{
			name: "cpu with room to grow under kvm plugs the current vCPUs of one socket of the maximum",
			apply: func(d *libvirtxml.Domain) error {
				return cpu(d, vmspec.CPU{Model: "host-model"}, 1, 4, host.AccelKVM, kvmHost)
			},
			want: libvirtxml.Domain{
				VCPU: &libvirtxml.DomainVCPU{Placement: "static", Current: 1, Value: 4},
				CPU: &libvirtxml.DomainCPU{Mode: "host-model", Features: noNesting,
					Topology: &libvirtxml.DomainCPUTopology{Sockets: 1, Dies: 1, Cores: 4, Threads: 1}},
			},
		},
		{
			name: "cpu with room to grow under tcg plugs them all",
			apply: func(d *libvirtxml.Domain) error {
				return cpu(d, vmspec.CPU{Model: "auto"}, 1, 4, host.AccelTCG, tcgHost)
			},
			want: libvirtxml.Domain{
				VCPU: &libvirtxml.DomainVCPU{Placement: "static", Value: 4},
				CPU:  &libvirtxml.DomainCPU{Topology: &libvirtxml.DomainCPUTopology{Sockets: 1, Dies: 1, Cores: 4, Threads: 1}},
			},
		},
		{
			name: "hotplug room without room adds nothing",
			apply: func(d *libvirtxml.Domain) error {
				d.VCPU, d.CPU, d.Memory = &libvirtxml.DomainVCPU{Value: 1}, &libvirtxml.DomainCPU{}, &libvirtxml.DomainMemory{Value: 1}
				return hotplugRoom(d, 1, host.AccelTCG, 0, 0)
			},
			want: libvirtxml.Domain{VCPU: &libvirtxml.DomainVCPU{Value: 1}, CPU: &libvirtxml.DomainCPU{}, Memory: &libvirtxml.DomainMemory{Value: 1}},
		},
		{
			name: "hotplug room under tcg: extra vCPUs offline, a NUMA cell, maxMemory and an empty virtio-mem device; kernel told to online it",
			apply: func(d *libvirtxml.Domain) error {
				d.VCPU = &libvirtxml.DomainVCPU{Value: 2}
				d.CPU = &libvirtxml.DomainCPU{}
				d.Memory = &libvirtxml.DomainMemory{Value: 262144, Unit: "KiB"}
				d.OS = &libvirtxml.DomainOS{Kernel: "/k", Cmdline: "console=ttyS0"}
				return hotplugRoom(d, 1, host.AccelTCG, 256<<20, 0)
			},
			want: libvirtxml.Domain{
				VCPU:          &libvirtxml.DomainVCPU{Value: 2},
				Memory:        &libvirtxml.DomainMemory{Value: 262144, Unit: "KiB"},
				MaximumMemory: &libvirtxml.DomainMaxMemory{Value: 524288, Unit: "KiB", Slots: 1},
				OS:            &libvirtxml.DomainOS{Kernel: "/k", Cmdline: "console=ttyS0 maxcpus=1 memhp_default_state=online_movable"},
				CPU: &libvirtxml.DomainCPU{Numa: &libvirtxml.DomainNuma{Cell: []libvirtxml.DomainCell{
					{ID: new(uint), CPUs: "0-1", Memory: 262144, Unit: "KiB"}}}},
				Devices: &libvirtxml.DomainDeviceList{Memorydevs: []libvirtxml.DomainMemorydev{{
					Model: "virtio-mem",
					Target: &libvirtxml.DomainMemorydevTarget{
						Size:      &libvirtxml.DomainMemorydevTargetSize{Value: 262144, Unit: "KiB"},
						Node:      &libvirtxml.DomainMemorydevTargetNode{Value: 0},
						Block:     &libvirtxml.DomainMemorydevTargetBlock{Value: 2048, Unit: "KiB"},
						Requested: &libvirtxml.DomainMemorydevTargetRequested{Value: 0, Unit: "KiB"},
					},
				}}},
			},
		},
		{
			name: "hotplug room in DIMMs: a NUMA cell, a slot per DIMM, no memory device at boot; kernel told to online them",
			apply: func(d *libvirtxml.Domain) error {
				d.VCPU = &libvirtxml.DomainVCPU{Value: 1}
				d.CPU = &libvirtxml.DomainCPU{}
				d.Memory = &libvirtxml.DomainMemory{Value: 262144, Unit: "KiB"}
				d.OS = &libvirtxml.DomainOS{Kernel: "/k", Cmdline: "console=ttyS0"}
				return hotplugRoom(d, 1, host.AccelTCG, 384<<20, 128<<20)
			},
			want: libvirtxml.Domain{
				VCPU:          &libvirtxml.DomainVCPU{Value: 1},
				Memory:        &libvirtxml.DomainMemory{Value: 262144, Unit: "KiB"},
				MaximumMemory: &libvirtxml.DomainMaxMemory{Value: 655360, Unit: "KiB", Slots: 3},
				OS:            &libvirtxml.DomainOS{Kernel: "/k", Cmdline: "console=ttyS0 memhp_default_state=online_movable"},
				CPU: &libvirtxml.DomainCPU{Numa: &libvirtxml.DomainNuma{Cell: []libvirtxml.DomainCell{
					{ID: new(uint), CPUs: "0-0", Memory: 262144, Unit: "KiB"}}}},
			},
		},
		{
			name: "firmware bios with kernel boot uses qboot",
			apply: func(d *libvirtxml.Domain) error {
				return firmware(d, vmspec.FirmwareBIOS, bootKernel, tcgHost.Firmware, "")
			},
			want: libvirtxml.Domain{OS: &libvirtxml.DomainOS{
				Loader: &libvirtxml.DomainLoader{Path: "/usr/share/qemu/qboot.rom", Readonly: "yes", Type: "rom"}}},
		},
		{
			name: "firmware bios with disk boot is SeaBIOS",
			apply: func(d *libvirtxml.Domain) error {
				return firmware(d, vmspec.FirmwareBIOS, bootDisk, tcgHost.Firmware, "")
			},
			want: libvirtxml.Domain{OS: &libvirtxml.DomainOS{}},
		},
		{
			name: "firmware uefi",
			apply: func(d *libvirtxml.Domain) error {
				return firmware(d, vmspec.FirmwareUEFI, bootDisk, tcgHost.Firmware, "/s/nvram.fd")
			},
			want: libvirtxml.Domain{OS: &libvirtxml.DomainOS{
				Loader: &libvirtxml.DomainLoader{Path: "/ovmf/CODE.fd", Readonly: "yes", Type: "pflash", Secure: "no"},
				NVRam:  &libvirtxml.DomainNVRam{NVRam: "/s/nvram.fd", Template: "/ovmf/VARS.fd"}}},
		},
		{
			name: "boot kernel with console",
			apply: func(d *libvirtxml.Domain) error {
				return bootSource(d, bootKernel, "quiet", true, Paths{Kernel: "/k", Initrd: "/i"})
			},
			want: libvirtxml.Domain{OS: &libvirtxml.DomainOS{Kernel: "/k", Initrd: "/i", Cmdline: "console=ttyS0 no_timer_check quiet"}},
		},
		{
			name: "disks: root disk boots over its base and nothing else, volumes follow with serials",
			apply: func(d *libvirtxml.Domain) error {
				return disks(d, vmspec.DiskBusVirtio, bootDisk, "/s/disk.qcow2", "/img/disk/disk.qcow2", "qcow2",
					[]vmspec.Volume{{Name: "data", Serial: "data"}}, map[string]string{"data": "/s/dev/data"})
			},
			want: libvirtxml.Domain{Devices: &libvirtxml.DomainDeviceList{Disks: []libvirtxml.DomainDisk{
				{
					Device: "disk",
					Driver: &libvirtxml.DomainDiskDriver{Name: "qemu", Type: "qcow2", Discard: "unmap"},
					Source: &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: "/s/disk.qcow2"}},
					Target: &libvirtxml.DomainDiskTarget{Dev: "vda", Bus: "virtio"},
					Boot:   &libvirtxml.DomainDeviceBoot{Order: 1},
					BackingStore: &libvirtxml.DomainDiskBackingStore{
						Format:       &libvirtxml.DomainDiskFormat{Type: "qcow2"},
						Source:       &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: "/img/disk/disk.qcow2"}},
						BackingStore: &libvirtxml.DomainDiskBackingStore{},
					},
				},
				{
					Device: "disk",
					Driver: &libvirtxml.DomainDiskDriver{Name: "qemu", Type: "raw", Cache: "none", IO: "native"},
					Source: &libvirtxml.DomainDiskSource{Block: &libvirtxml.DomainDiskSourceBlock{Dev: "/s/dev/data"}},
					Target: &libvirtxml.DomainDiskTarget{Dev: "vdb", Bus: "virtio"},
					Serial: "data",
				},
			}}},
		},
		{
			name:  "cloud-init seed is a read-only virtio disk",
			apply: func(d *libvirtxml.Domain) error { return cloudInit(d, true, "/s/cidata.iso") },
			want: libvirtxml.Domain{Devices: &libvirtxml.DomainDeviceList{Disks: []libvirtxml.DomainDisk{{
				Device:   "disk",
				Driver:   &libvirtxml.DomainDiskDriver{Name: "qemu", Type: "raw"},
				Source:   &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: "/s/cidata.iso"}},
				Target:   &libvirtxml.DomainDiskTarget{Dev: "vda", Bus: "virtio"},
				ReadOnly: &libvirtxml.DomainDiskReadOnly{},
				Serial:   "cidata",
			}}}},
		},
		{
			name:  "no shares: no filesystem, private memory",
			apply: func(d *libvirtxml.Domain) error { return filesystems(d, nil, nil) },
			want:  libvirtxml.Domain{},
		},
		{
			name: "a share is a virtio-fs device on its server's socket, memory shared",
			apply: func(d *libvirtxml.Domain) error {
				sh := vmspec.NewShare("/etc/config", true)
				return filesystems(d, []vmspec.Share{sh}, map[string]string{sh.Tag: "/s/fs-0.sock"})
			},
			want: libvirtxml.Domain{
				MemoryBacking: &libvirtxml.DomainMemoryBacking{
					MemorySource: &libvirtxml.DomainMemorySource{Type: "memfd"},
					MemoryAccess: &libvirtxml.DomainMemoryAccess{Mode: "shared"},
				},
				Devices: &libvirtxml.DomainDeviceList{Filesystems: []libvirtxml.DomainFilesystem{{
					Driver: &libvirtxml.DomainFilesystemDriver{Type: "virtiofs", Queue: 1024},
					Source: &libvirtxml.DomainFilesystemSource{Mount: &libvirtxml.DomainFilesystemSourceMount{Socket: "/s/fs-0.sock"}},
					Target: &libvirtxml.DomainFilesystemTarget{Dir: "vmpod:config_d20e9af1"},
				}}},
			},
		},
		{
			name: "network joins the runtime's tap with the pod's MAC",
			apply: func(d *libvirtxml.Domain) error {
				return network(d, []vmspec.NIC{{Name: "eth0"}}, map[string]NIC{"eth0": {Tap: "tap0", MAC: "0a:58:00:00:00:01"}})
			},
			want: libvirtxml.Domain{Devices: &libvirtxml.DomainDeviceList{Interfaces: []libvirtxml.DomainInterface{{
				Source: &libvirtxml.DomainInterfaceSource{Ethernet: &libvirtxml.DomainInterfaceSourceEthernet{}},
				Target: &libvirtxml.DomainInterfaceTarget{Dev: "tap0", Managed: "no"},
				MAC:    &libvirtxml.DomainInterfaceMAC{Address: "0a:58:00:00:00:01"},
				Model:  &libvirtxml.DomainInterfaceModel{Type: "virtio"},
			}}}},
		},
		{
			name:  "console on a unix socket, no QEMU log file",
			apply: func(d *libvirtxml.Domain) error { return console(d, true, "/s/c.sock") },
			want: libvirtxml.Domain{Devices: &libvirtxml.DomainDeviceList{
				Serials: []libvirtxml.DomainSerial{{
					Source: &libvirtxml.DomainChardevSource{UNIX: &libvirtxml.DomainChardevSourceUNIX{Mode: "bind", Path: "/s/c.sock"}},
					Target: &libvirtxml.DomainSerialTarget{Type: "isa-serial", Port: &port, Model: &libvirtxml.DomainSerialTargetModel{Name: "isa-serial"}},
				}},
				Consoles: []libvirtxml.DomainConsole{{
					Source: &libvirtxml.DomainChardevSource{UNIX: &libvirtxml.DomainChardevSourceUNIX{Mode: "bind", Path: "/s/c.sock"}},
					Target: &libvirtxml.DomainConsoleTarget{Type: "serial", Port: &port},
				}},
			}},
		},
		{
			name:  "console off adds nothing",
			apply: func(d *libvirtxml.Domain) error { return console(d, false, "") },
			want:  libvirtxml.Domain{},
		},
		{
			name: "the jailer as emulator, its spec in its environment",
			apply: func(d *libvirtxml.Domain) error {
				return emulator(d, "/j/vmpod-qemu", []string{"VMPOD_JAIL=/j/jail.json"})
			},
			want: libvirtxml.Domain{
				Devices:         &libvirtxml.DomainDeviceList{Emulator: "/j/vmpod-qemu"},
				QEMUCommandline: &libvirtxml.DomainQEMUCommandline{Envs: []libvirtxml.DomainQEMUCommandlineEnv{{Name: "VMPOD_JAIL", Value: "/j/jail.json"}}},
			},
		},
		{
			name:  "no emulator stand-in keeps the node's QEMU",
			apply: func(d *libvirtxml.Domain) error { return emulator(d, "", nil) },
			want:  libvirtxml.Domain{},
		},
		{
			name:  "guest agent channel",
			apply: func(d *libvirtxml.Domain) error { return guestAgent(d, "/s/qga.sock") },
			want: libvirtxml.Domain{Devices: &libvirtxml.DomainDeviceList{Channels: []libvirtxml.DomainChannel{{
				Source: &libvirtxml.DomainChardevSource{UNIX: &libvirtxml.DomainChardevSourceUNIX{Mode: "bind", Path: "/s/qga.sock"}},
				Target: &libvirtxml.DomainChannelTarget{VirtIO: &libvirtxml.DomainChannelTargetVirtIO{Name: "org.qemu.guest_agent.0"}},
			}}}},
		},
		{
			name:  "clock under tcg has no kvmclock",
			apply: func(d *libvirtxml.Domain) error { return clock(d, host.AccelTCG) },
			want: libvirtxml.Domain{Clock: &libvirtxml.DomainClock{Offset: "utc", Timer: []libvirtxml.DomainTimer{
				{Name: "rtc", TickPolicy: "catchup"}, {Name: "pit", TickPolicy: "delay"}, {Name: "hpet", Present: "no"},
			}}},
		},
		{
			name:  "lifecycle",
			apply: lifecycle,
			want:  libvirtxml.Domain{OnPoweroff: "destroy", OnReboot: "restart"},
		},
		{
			name:  "a panic ends the VM: pvpanic, and on_crash destroys",
			apply: crash,
			want: libvirtxml.Domain{
				OnCrash: "destroy",
				Devices: &libvirtxml.DomainDeviceList{Panics: []libvirtxml.DomainPanic{{Model: "isa"}}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got libvirtxml.Domain
			if err := tt.apply(&got); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("domain (-want +got):\n%s", diff)
			}
		})
	}
}

// What a node cannot run is FailedPrecondition naming the annotation; what
// the runtime forgot to prepare is Internal.
func TestStepErrors(t *testing.T) {
	tests := []struct {
		name  string
		apply func(*libvirtxml.Domain) error
		class func(error) bool
		want  string
	}{
		{"machine the node lacks", func(d *libvirtxml.Domain) error { return accelMachine(d, host.AccelTCG, "virt", tcgHost) },
			errdefs.IsFailedPrecondition, `vmpod.io/machine: "virt": the node's QEMU does not offer it`},
		{"passthrough under tcg", func(d *libvirtxml.Domain) error {
			return cpu(d, vmspec.CPU{Model: "host-passthrough"}, 1, 0, host.AccelTCG, tcgHost)
		}, errdefs.IsFailedPrecondition, `vmpod.io/cpu-model: "host-passthrough": needs KVM`},
		{"unknown model", func(d *libvirtxml.Domain) error {
			return cpu(d, vmspec.CPU{Model: "Cascadelake"}, 1, 0, host.AccelTCG, tcgHost)
		},
			errdefs.IsFailedPrecondition, `vmpod.io/cpu-model: "Cascadelake": not a CPU model this node can run`},
		{"too many vcpus", func(d *libvirtxml.Domain) error {
			return cpu(d, vmspec.CPU{Model: "auto"}, 256, 0, host.AccelTCG, tcgHost)
		},
			errdefs.IsFailedPrecondition, "the node allows at most 255 vCPUs"},
		{"max-vcpus beyond the node", func(d *libvirtxml.Domain) error {
			return cpu(d, vmspec.CPU{Model: "auto"}, 2, 300, host.AccelTCG, tcgHost)
		},
			errdefs.IsFailedPrecondition, `vmpod.io/max-vcpus: "300": the node allows at most 255 vCPUs`},
		{"max-vcpus under tcg with disk boot", func(d *libvirtxml.Domain) error {
			d.VCPU, d.CPU, d.Memory = &libvirtxml.DomainVCPU{Value: 4}, &libvirtxml.DomainCPU{}, &libvirtxml.DomainMemory{Value: 1}
			return hotplugRoom(d, 2, host.AccelTCG, 0, 0)
		},
			errdefs.IsFailedPrecondition, `vmpod.io/max-vcpus: "4": under TCG the guest's extra vCPUs are kept offline through the kernel command line`},
		{"uefi without ovmf", func(d *libvirtxml.Domain) error {
			return firmware(d, vmspec.FirmwareUEFI, bootDisk, host.Firmware{}, "/n")
		},
			errdefs.IsFailedPrecondition, `vmpod.io/firmware: "uefi": the node has no OVMF`},
		{"nothing to boot", func(d *libvirtxml.Domain) error { return bootSource(d, bootNothing, "", true, Paths{}) },
			errdefs.IsFailedPrecondition, "vmpod.io/boot"},
		{"uefi without nvram path", func(d *libvirtxml.Domain) error {
			return firmware(d, vmspec.FirmwareUEFI, bootDisk, tcgHost.Firmware, "")
		}, errdefs.IsInternal, "paths: NVRAM is required"},
		{"volume without path", func(d *libvirtxml.Domain) error {
			return disks(d, vmspec.DiskBusVirtio, bootDisk, "", "", "", []vmspec.Volume{{Name: "data"}}, nil)
		}, errdefs.IsInternal, `paths: Volumes["data"] is required`},
		{"root disk without its base", func(d *libvirtxml.Domain) error {
			return disks(d, vmspec.DiskBusVirtio, bootDisk, "/s/disk.qcow2", "", "", nil, nil)
		}, errdefs.IsInternal, `paths: BaseDisk and BaseFormat (qcow2 or raw) is required`},
		{"nic without tap", func(d *libvirtxml.Domain) error { return network(d, []vmspec.NIC{{Name: "eth0"}}, nil) },
			errdefs.IsInternal, `paths: NICs["eth0"] with tap and MAC is required`},
		{"emulator environment without emulator", func(d *libvirtxml.Domain) error { return emulator(d, "", []string{"A=b"}) },
			errdefs.IsInternal, "paths: Emulator (EmulatorEnv is set) is required"},
		{"console without socket", func(d *libvirtxml.Domain) error { return console(d, true, "") },
			errdefs.IsInternal, "paths: Console is required"},
		{"cloud-init without seed", func(d *libvirtxml.Domain) error { return cloudInit(d, true, "") },
			errdefs.IsInternal, "paths: CloudInitISO is required"},
		{"share without its server's socket", func(d *libvirtxml.Domain) error {
			return filesystems(d, []vmspec.Share{vmspec.NewShare("/data", false)}, map[string]string{"vmpod:other_00000000": "/s"})
		}, errdefs.IsInternal, `paths: Shares["vmpod:data_`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.apply(&libvirtxml.Domain{})
			if err == nil || !tt.class(err) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %v, want one of the right class containing %q", err, tt.want)
			}
		})
	}
}

func TestResolveAccel(t *testing.T) {
	probedTCGHost := tcgHost
	probedTCGHost.KVMReason = "a guest under KVM failed"
	tests := []struct {
		policy vmspec.Accel
		h      host.Host
		want   host.Accel
		err    string
	}{
		{vmspec.AccelAuto, kvmHost, host.AccelKVM, ""},
		{vmspec.AccelAuto, tcgHost, host.AccelTCG, ""},
		{vmspec.AccelTCG, kvmHost, host.AccelTCG, ""},
		{vmspec.AccelKVM, tcgHost, "", `vmpod.io/accel: "kvm": the node has no KVM`},
		{vmspec.AccelKVM, probedTCGHost, "", `vmpod.io/accel: "kvm": the node has no usable KVM (a guest under KVM failed)`},
		{vmspec.AccelAuto, probedTCGHost, host.AccelTCG, ""},
		{vmspec.AccelAuto, host.Host{}, "", "the node runs no QEMU guests"},
	}
	for _, tt := range tests {
		got, err := resolveAccel(tt.policy, tt.h)
		if tt.err != "" {
			if err == nil || !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("resolveAccel(%s, %v) error = %v, want FailedPrecondition containing %q", tt.policy, tt.h.Accels, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("resolveAccel(%s, %v) = %q, %v, want %q", tt.policy, tt.h.Accels, got, err, tt.want)
		}
	}
}
