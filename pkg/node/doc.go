// Package node reads what this node can run: the hypervisor's capabilities,
// parsed by pkg/host, with the firmware files checked on this filesystem,
// and KVM only where the KVM probe (kvm.go) saw a guest run under it.
//
// It may import pkg/host, pkg/virt, golang.org/x/sys/unix and the standard
// library.
package node
