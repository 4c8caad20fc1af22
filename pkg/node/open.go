package node

import (
	"context"

	"github.com/vmpod/vmpod/pkg/host"
	"github.com/vmpod/vmpod/pkg/virt"
)

// Options say where the node keeps what libvirt and the KVM probe share
// between processes.
type Options struct {
	// CapsCache is the node-wide warm copy of libvirt's QEMU capabilities.
	CapsCache string
	// KVMCache is the KVM probe's verdict (DefaultKVMCache if empty).
	KVMCache string
	// Pod opens a pod's libvirt: libvirt makes no cgroups, so QEMU stays
	// in the opener's (the pod's) cgroup until the runtime moves it.
	Pod bool
	// Jailer is the emulator a pod's domains name (vm.Jail.Jailer): its
	// capabilities are probed at open and shared through CapsCache, so only
	// the node's first pod pays for the probe.
	Jailer string
	// ProbeArgv, when set, is a command that fills a cold CapsCache in a
	// process of its own (vm-runtime caps-probe; embedded.Probe): libvirt
	// keeps what it probed in its process as probed, while an open from
	// the cache loads it as vmpod trims it (pkg/virt/libvirt maskCaps),
	// so the process that runs the node's VMs never probes itself.
	ProbeArgv []string
}

// HostOf is what VMs run on through hv: libvirt's capabilities, less KVM
// where the probe's verdict (cached; probed again when QEMU, the kernel or
// /dev/kvm changed) says it does not work.
func HostOf(ctx context.Context, hv virt.Hypervisor, o Options) (host.Host, error) {
	kvm, err := CheckKVM(ctx, ProbeOptions{CacheFile: o.KVMCache})
	if err != nil {
		return host.Host{}, err
	}
	return Host(ctx, hv, kvm)
}
