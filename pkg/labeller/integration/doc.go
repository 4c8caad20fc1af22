// Package integration tests the labeller against a real kube-apiserver
// (k8s.io/kubernetes' StartTestServer) over an embedded etcd, in-process.
// It is a package of its own so that pkg/labeller's unit tests do not
// build an apiserver.
package integration
