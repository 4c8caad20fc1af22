// Package node reads what this node can run: the hypervisor's capabilities,
// parsed by pkg/host, with the firmware files checked on this filesystem,
// and KVM only where the KVM probe (kvm.go) saw a guest run under it.
//
// Open is how every vmpod process opens libvirt for the node or a pod, and
// HostOf what its VMs run on.
//
// It may import pkg/host, pkg/virt, pkg/virt/libvirt, golang.org/x/sys/unix
// and the standard library.
package node
