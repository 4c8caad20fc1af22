// Package vmspec describes the virtual machine a pod asks for.
//
// A Spec is built from a Kubernetes Pod (FromPod: the scheduler plugin and
// `vm-runtime render`) or from the OCI runtime spec and annotations that
// containerd hands a runtime v2 shim (FromOCI). Both read the same vmpod.io/
// annotations (annotations.go) and end in the same Validate, so a pod means the
// same VM wherever it is looked at.
//
// Nothing a user writes can name a host path or a host device: disks and
// kernels come from the container image and the pod's volumes only, and the
// runtime resolves them to host paths itself (see pkg/convert.Paths). Of
// the container's bind mounts, only the pod's own volumes (and host dirs
// a node admin allows) become the guest's shares (MountRules).
//
// This package does no I/O. It may import the standard library, the
// Kubernetes API types, the OCI runtime-spec types and containerd's errdefs;
// of vmpod it imports pkg/ocikeys alone (the CRI's annotation keys, which
// the shim reads without this package), and every other vmpod package may
// import it.
package vmspec
