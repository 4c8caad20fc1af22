// Package integration tests the labeller against a real kube-apiserver over
// an embedded etcd, in-process (internal/testenv/controlplane): the labels
// it writes next to other writers' and, under manifests/labeller.yaml and
// labeller-policy.yaml with RBAC on, what its credentials may change. It
// is a package of its own so that pkg/labeller's unit tests do not build
// an apiserver.
//
// The tests may import pkg/labeller, pkg/host, pkg/vmspec and
// internal/testenv, and no other vmpod package.
package integration
