// Package scheduler tests the VMPlacement plugin in a real kube-scheduler
// against a real kube-apiserver and etcd, all in the test process and on
// 127.0.0.1.
//
// The control plane comes from internal/testenv/controlplane; the
// scheduler is built here by kube-scheduler's app.Setup with the plugin
// registered, as cmd/scheduler-plugin builds it. The tests may import
// pkg/scheduler/vmplacement, pkg/vmspec (with vmspectest) and
// internal/testenv/controlplane, and no other vmpod package.
package scheduler
