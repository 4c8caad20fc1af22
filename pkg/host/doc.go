// Package host describes what one node can run: its architecture, QEMU
// binary, accelerators (KVM or TCG), machine types, CPU models and
// features, vCPU limit, firmware and memory. Parse reads all of it from
// libvirt's capabilities and domain capabilities XML.
//
// A Host is plain data. pkg/convert builds a domain for it, and the
// labeller turns it into node labels that the scheduler plugin reads; none
// of them needs a libvirt connection to do so, and tests feed captured XML.
//
// Imports: the standard library and libvirt.org/go/libvirtxml only. No cgo,
// no project packages, and no file system access outside tests: the caller
// fetches the XML and, through WithFiles, answers whether a file exists.
package host
