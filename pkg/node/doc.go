// Package node reads what this node can run: the hypervisor's capabilities,
// parsed by pkg/host, with the firmware files checked on this filesystem.
//
// It may import pkg/host, pkg/virt and the standard library.
package node
