package node

import (
	"context"
	"flag"
	"fmt"

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

// HelperArgs are the arguments of `vm-runtime hypervisor` (the helper a
// pod's shim starts, pkg/virt/remote) that open root with o;
// ParseHelperArgs reads them back.
func (o Options) HelperArgs(root string) []string {
	args := []string{"hypervisor", "--root", root, "--caps-cache", o.CapsCache, "--kvm-cache", o.KVMCache, "--jailer", o.Jailer}
	if o.Pod {
		args = append(args, "--pod")
	}
	return args
}

// ParseHelperArgs reads HelperArgs, without the leading "hypervisor".
func ParseHelperArgs(args []string) (root string, o Options, err error) {
	fs := flag.NewFlagSet("hypervisor", flag.ContinueOnError)
	fs.StringVar(&root, "root", "", "the embedded libvirt root to open")
	fs.StringVar(&o.CapsCache, "caps-cache", "", "the node's warm copy of libvirt's QEMU capabilities")
	fs.StringVar(&o.KVMCache, "kvm-cache", "", "the KVM probe's verdict")
	fs.StringVar(&o.Jailer, "jailer", "", "the emulator the pod's domains name")
	fs.BoolVar(&o.Pod, "pod", false, "a pod's root: libvirt makes no cgroups")
	if err := fs.Parse(args); err != nil {
		return "", Options{}, err
	}
	if root == "" || fs.NArg() > 0 {
		return "", Options{}, fmt.Errorf("hypervisor: want --root DIR and no other arguments, got %q", args)
	}
	return root, o, nil
}
