// Package ocikeys names what containerd's CRI plugin writes on the OCI
// spec of each task it hands a shim, and the interface its CNI call makes
// in a pod's network namespace: the facts both the shim and the VM core
// (pkg/vmspec) read. It imports nothing, so that the shim, which lives as
// long as its pod, links no Kubernetes API for a few strings.
package ocikeys

// Annotations containerd's CRI plugin puts on the OCI spec of each task.
const (
	CRIContainerType     = "io.kubernetes.cri.container-type"
	CRIContainerName     = "io.kubernetes.cri.container-name"
	CRIImageName         = "io.kubernetes.cri.image-name"
	CRISandboxID         = "io.kubernetes.cri.sandbox-id"
	CRISandboxName       = "io.kubernetes.cri.sandbox-name"
	CRISandboxNamespace  = "io.kubernetes.cri.sandbox-namespace"
	CRISandboxUID        = "io.kubernetes.cri.sandbox-uid"
	CRISandboxMemory     = "io.kubernetes.cri.sandbox-memory"
	CRIContainerTypeSbx  = "sandbox"
	CRIContainerTypeCntr = "container"
)

// PodInterface is the interface the CRI's CNI call makes in a pod's
// network namespace, whose address is the pod IP the guest takes over.
const PodInterface = "eth0"
