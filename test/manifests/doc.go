// Package manifests tests what a cluster admin applies. Every file under
// manifests/, and the overlays hack/local-up.sh and the kind workflow apply
// (hack/local/manifests, hack/kind/manifests), is built with kustomize as
// `kubectl apply -k` builds it and applied to a real kube-apiserver with
// server-side dry-run. The RuntimeClass is checked against the overhead
// model and the label the labeller writes, the scheduler's
// KubeSchedulerConfiguration is loaded by the scheduler's own code with
// VMPlacement registered, and the installer script is run against
// containerd 1.7- and 2.x-style configs, writing and starting the node
// daemon's unit (with a fake systemctl).
//
// The apiserver comes from internal/testenv/controlplane. The tests may
// import pkg/vmspec, pkg/scheduler/vmplacement and internal/testenv, and
// no other vmpod package.
package manifests
