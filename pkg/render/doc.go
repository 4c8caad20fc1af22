// Package render shows the libvirt domain a Pod manifest becomes on a node:
// the code behind `vm-runtime render`. It goes through the same vmspec,
// vm.Layout and convert code the shim uses, with the image's contents
// assumed rather than read.
//
// It may import vmspec, convert, host, vm, the Kubernetes API types and
// sigs.k8s.io/yaml.
package render
