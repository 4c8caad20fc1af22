// Package e2e tests vmpod end to end against a running cluster: VM pods
// created through the API, placed by the VMPlacement scheduler, started by
// a real kubelet through containerd and the vmpod shim.
//
// Every file has the build tag e2e, so that a plain `go test ./...` neither
// builds nor lists this package: `make e2e` starts a local cluster
// (hack/local-up.sh) and runs `go test -tags e2e ./test/e2e` against it; the
// kind workflow (.github/workflows/kind-e2e.yaml) does the same on kind.
// Built with the tag, the tests need the cluster and fail without it.
//
// Environment ($KUBECONFIG and the rest: after hack/local-up.sh,
// `source _output/local/env` sets all of it):
// VMPOD_E2E_NODE_EXEC (required) is a command prefix that runs a command
// on the (single) node, used to reach pod IPs and to check that the tests
// left nothing on the node; VMPOD_E2E_IMAGE is the test guest's
// containerdisk (hack/guest/build.sh), already on the node;
// VMPOD_E2E_STATE_ROOT is the shims' VMPOD_STATE_ROOT on the node;
// VMPOD_E2E_CGROUP_ROOT the kubelet's cgroupRoot (unset: any);
// VMPOD_E2E_NODE_DOWN a file that, while it exists, keeps the node's
// units (kubelet, runtimes) from starting again, and VMPOD_E2E_NODE_VOLATILE
// the paths, space-separated, where the node keeps what a reboot clears
// (TestNodeReboot).
//
// A VM-only node, whose kubelet talks to vm-runtime cri (hack/local-up.sh's
// second node), is tested when VMPOD_E2E_CRI_NODE names it (TestCRINode
// skips otherwise), with VMPOD_E2E_CRI_NODE_EXEC (a command prefix that
// runs on it), VMPOD_E2E_CRI_STATE_ROOT and VMPOD_E2E_CRI_NETNS_DIR (the
// server's --state-root and --netns-dir), VMPOD_E2E_CRI_CGROUP_ROOT and
// VMPOD_E2E_CRI_METRICS_URL (its --metrics-address, as a URL on the
// node), VMPOD_E2E_CRI_NODE_DOWN and VMPOD_E2E_CRI_NODE_VOLATILE.
//
// Every test calls checkLeaks first (TestLeakChecked holds them to it):
// after the test, each node must be back to what it had before it
// (leftoverScript).
package e2e
