// Package e2e tests vmpod end to end against a running cluster: VM pods
// created through the API, placed by the VMPlacement scheduler, started by
// a real kubelet through containerd and the vmpod shim.
//
// The tests run when VMPOD_E2E=1, against $KUBECONFIG. After
// hack/local-up.sh, `source _output/local/env` sets everything; the kind
// workflow (.github/workflows/kind-e2e.yaml) sets it for kind.
// VMPOD_E2E_NODE_EXEC is a command prefix that runs a command on the
// (single) node, used to reach pod IPs and to look for leftovers; without
// it those checks are skipped. VMPOD_E2E_IMAGE is the test guest's
// containerdisk (hack/guest/build.sh), already on the node.
package e2e
