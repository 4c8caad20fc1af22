// Package labeller keeps one Kubernetes Node's vmpod labels in step with
// what the node can run.
//
// Labels turns a host.Host (pkg/host: accelerators, CPU models and
// features, machine types, vCPU limit, firmware) into node labels; it is
// pure and is what the scheduler plugin's view of a node is made of.
// Owns says which label keys are the labeller's; Diff compares a node's
// labels with the wanted ones over those keys only, and Change.MergePatch
// is the JSON merge patch that applies the difference. A Reconciler reads
// the capabilities, gets the Node, and patches it, once or on an interval.
// docs/labels.md documents every label.
//
// Imports: vmspec, host, client-go and apimachinery, and the standard
// library. It never imports pkg/virt (no cgo): the caller hands the
// Reconciler a function that reads the node's capabilities.
package labeller
