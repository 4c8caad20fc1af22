// Package scheduler tests the VMPlacement plugin in a real kube-scheduler
// against a real kube-apiserver and etcd, all in the test process and on
// 127.0.0.1.
//
// The control plane comes from internal/testenv/controlplane; the
// scheduler is built here by kube-scheduler's app.Setup with the plugin
// registered, as cmd/scheduler-plugin builds it, or, where its feature
// gates matter (they are process-wide, and the apiserver's), is the
// cmd/scheduler-plugin binary itself, run as a process. The tests may import
// pkg/scheduler/vmplacement, pkg/vmspec (with vmspectest) and
// internal/testenv/controlplane, and no other vmpod package.
package scheduler
