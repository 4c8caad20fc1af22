// Package convert turns the VM a pod asks for (vmspec.Spec) into a libvirt
// domain on one node (host.Host), with the host paths the runtime prepared
// (Paths). It is the only seam between the Kubernetes view of a VM and
// libvirt's.
//
// Domain is a pure function: no os, no time, no cgo, no randomness. It runs
// a list of small steps, one per device area, in the order given by steps()
// in convert.go; each step takes exactly the Spec, Host and Paths fields it
// needs. Golden XML files under testdata/ show the whole result (regenerate
// with `go test ./pkg/convert -update`); each golden domain is checked by
// virt-xml-validate and defined on libvirt's test driver.
//
// It may import vmspec, host, libvirtxml, containerd's errdefs and the
// standard library (not os, os/exec, time, math/rand or net).
package convert
