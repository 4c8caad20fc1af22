// Package vmplacement is the VMPlacement kube-scheduler plugin: it places
// vmpod VM pods (Pods whose runtimeClassName is a vmpod RuntimeClass) on
// nodes that can run them, and prefers nodes that already hold the VM's
// disk image and that suit the configured pack or spread strategy.
//
//   - PreFilter reads the VM a pod asks for with vmspec.FromPod; pods of
//     other RuntimeClasses are skipped, so Filter and Score never see them
//     and cost nothing. It checks the VM against each kind of node (a
//     capsClass: one set of labeller labels) once, and when some kind
//     cannot run it, names the nodes that can. The node informer's events
//     keep each node's class and each class's node names (members.go), so
//     for a pod whose node affinity is decided by labeller labels (or that
//     has none) that takes no pass over the nodes.
//     When Filter could only agree with NodeResourcesFit (every kind of
//     node can run the VM, and no pod takes memory beyond what
//     NodeResourcesFit counts), it skips Filter for the VM pod as well,
//     and Reserve checks the chosen node instead (skip.go).
//   - Filter compares that VM with the node labels the vmpod labeller
//     writes (vmspec.Label*), through the node's class, and checks memory
//     including the VM's real overhead (vmspec.OverheadFor), counting only
//     what NodeResourcesFit does not already count. What it reads from a
//     node is cached by the snapshot's NodeInfo while the node and its
//     pods are unchanged (node.go, index.go).
//   - Score ranks nodes by disk-image locality and by free memory.
//
// docs/scheduler.md describes the filter reasons, the arguments and how
// memory is counted. cmd/scheduler-plugin builds the plugin into a
// kube-scheduler.
//
// Imports: pkg/vmspec (and its pkg/ocikeys), the Kubernetes API types and apimachinery,
// client-go's informers (the framework handle's node informer), and the
// scheduler framework (k8s.io/kube-scheduler/framework and
// k8s.io/kubernetes/pkg/scheduler/...). Never pkg/convert, pkg/virt,
// pkg/vm or pkg/host: the plugin sees a node only through its labels.
package vmplacement
