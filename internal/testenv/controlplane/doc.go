// Package controlplane starts a real Kubernetes control plane for tests:
// an embedded etcd and a kube-apiserver (k8s.io/kubernetes'
// StartTestServer, which also makes the serving certificate and the
// service account signing key and issuer for bound tokens), both in the
// test process and listening on 127.0.0.1 ports the kernel picks.
//
// Start returns the apiserver's privileged loopback rest.Config and a
// clientset; Kubeconfig writes a kubeconfig file for components that read
// one (the scheduler). Everything stops at t.Cleanup, apiserver first,
// even when the test fails or Start itself fails half way, and every
// directory it made is removed. It starts no subprocess. The first Start
// turns klog down to errors, as the apiserver logs thousands of lines a
// test at info level.
//
// Nothing creates service accounts or removes the not-ready taint from
// nodes (there is no kube-controller-manager), so the ServiceAccount and
// TaintNodesByCondition admission plugins are always off.
//
// Imports: k8s.io (apiserver, client-go, klog, kubernetes' apiserver test
// server) and etcd's embed package; no vmpod package.
package controlplane
