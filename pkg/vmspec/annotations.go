package vmspec

// Every annotation vmpod reads. docs/annotations.md documents each one; a
// test keeps that page and this file in step. containerd passes them to the
// shim only when told to: pod_annotations = ["vmpod.io/*"].
const (
	// Prefix is the prefix of every vmpod annotation.
	Prefix = "vmpod.io/"

	AnnotationAccel                  = Prefix + "accel"
	AnnotationCPUModel               = Prefix + "cpu-model"
	AnnotationCPUFeatures            = Prefix + "cpu-features"
	AnnotationNestedVirt             = Prefix + "nested-virt"
	AnnotationFirmware               = Prefix + "firmware"
	AnnotationMachine                = Prefix + "machine"
	AnnotationBoot                   = Prefix + "boot"
	AnnotationKernelCmdline          = Prefix + "kernel-cmdline"
	AnnotationDiskBus                = Prefix + "disk-bus"
	AnnotationCloudInitUserData      = Prefix + "cloud-init-user-data"
	AnnotationCloudInitNetworkConfig = Prefix + "cloud-init-network-config"
	AnnotationCloudInitVolume        = Prefix + "cloud-init-volume"
	AnnotationSSHAuthorizedKeys      = Prefix + "ssh-authorized-keys"
	AnnotationConsole                = Prefix + "console"
	AnnotationNetwork                = Prefix + "network"
	AnnotationMaxVCPUs               = Prefix + "max-vcpus"
	AnnotationMaxMemory              = Prefix + "max-memory"
	AnnotationMemoryHotplug          = Prefix + "memory-hotplug"
)

// AnnotationInfo documents one annotation: docs/annotations.md is checked
// against this table.
type AnnotationInfo struct {
	Key string
	// Type is "enum", "string", "integer", "quantity" (a Kubernetes
	// resource quantity such as 2Gi), "list" (comma-separated) or "lines"
	// (newline-separated).
	Type string
	// Values are the accepted values of an enum.
	Values  []string
	Default string
	Example string
}

// Annotations lists every annotation in the order the docs show them.
var Annotations = []AnnotationInfo{
	{Key: AnnotationAccel, Type: "enum", Values: []string{"auto", "kvm", "tcg"}, Default: "auto", Example: "kvm"},
	{Key: AnnotationCPUModel, Type: "string", Default: CPUModelAuto, Example: "host-passthrough"},
	{Key: AnnotationCPUFeatures, Type: "list", Default: "", Example: "avx2,aes"},
	{Key: AnnotationNestedVirt, Type: "enum", Values: []string{"off", "on"}, Default: "off", Example: "on"},
	{Key: AnnotationFirmware, Type: "enum", Values: []string{"bios", "uefi"}, Default: "bios", Example: "uefi"},
	{Key: AnnotationMachine, Type: "string", Default: DefaultMachine, Example: "pc-q35-7.2"},
	{Key: AnnotationBoot, Type: "enum", Values: []string{"auto", "kernel", "disk"}, Default: "auto", Example: "disk"},
	{Key: AnnotationKernelCmdline, Type: "string", Default: "", Example: "quiet loglevel=3"},
	{Key: AnnotationDiskBus, Type: "enum", Values: []string{"virtio", "sata", "scsi"}, Default: "virtio", Example: "sata"},
	{Key: AnnotationCloudInitUserData, Type: "string", Default: "", Example: "#cloud-config\\npassword: secret"},
	{Key: AnnotationCloudInitNetworkConfig, Type: "string", Default: "", Example: "version: 2"},
	{Key: AnnotationCloudInitVolume, Type: "string", Default: "", Example: "cloud-init"},
	{Key: AnnotationSSHAuthorizedKeys, Type: "lines", Default: "", Example: "ssh-ed25519 AAAA... me@laptop"},
	{Key: AnnotationConsole, Type: "enum", Values: []string{"on", "off"}, Default: "on", Example: "off"},
	{Key: AnnotationNetwork, Type: "enum", Values: []string{"pod", "none"}, Default: "pod", Example: "none"},
	{Key: AnnotationMaxVCPUs, Type: "integer", Default: "", Example: "4"},
	{Key: AnnotationMaxMemory, Type: "quantity", Default: "", Example: "2Gi"},
	{Key: AnnotationMemoryHotplug, Type: "enum", Values: []string{string(MemoryHotplugVirtioMem), string(MemoryHotplugDIMM)}, Default: string(MemoryHotplugVirtioMem), Example: string(MemoryHotplugDIMM)},
}

const (
	// DefaultMachine is the machine type when vmpod.io/machine is unset.
	DefaultMachine = "q35"
	// MaxCmdlineLen is the x86 kernel's command line limit (COMMAND_LINE_SIZE)
	// less room for the arguments vmpod adds itself.
	MaxCmdlineLen = 1792
	// MaxCloudInitLen bounds each inline cloud-init document; larger data
	// belongs in a ConfigMap or Secret volume.
	MaxCloudInitLen = 64 << 10
)

func annotationInfo(key string) (AnnotationInfo, bool) {
	for _, a := range Annotations {
		if a.Key == key {
			return a, true
		}
	}
	return AnnotationInfo{}, false
}

// AnnotationKeys returns every annotation key, in doc order.
func AnnotationKeys() []string {
	keys := make([]string, len(Annotations))
	for i, a := range Annotations {
		keys[i] = a.Key
	}
	return keys
}
