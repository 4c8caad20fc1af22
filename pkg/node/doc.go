// Package node reads what this node can run: the hypervisor's capabilities,
// parsed by pkg/host, with the firmware files checked on this filesystem,
// and KVM only where the KVM probe (kvm.go) saw a guest run under it.
//
// HostOf is what a node's or a pod's VMs run on; Options say where the
// node keeps what libvirt and the KVM probe share (pkg/node/embedded opens
// libvirt with them, in the processes that link it).
//
// It may import pkg/host, pkg/virt, golang.org/x/sys/unix and the standard
// library; not libvirt: the shim imports it and links no cgo.
package node
