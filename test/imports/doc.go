// Package imports holds the test that keeps the import rules the packages'
// doc.go files state and the build relies on: pkg/convert is pure (no cgo,
// no I/O, only what its doc allows), and pkg/virt/libvirt is the one
// package that uses libvirt's cgo binding.
package imports
