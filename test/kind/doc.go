// Package kind runs vmpod on a real kind cluster the way a user installs
// it, offline: the node image built here (hack/kind/images.sh, with QEMU
// and libvirt's QEMU driver from Debian's packages in the node), `kind
// create cluster --config hack/kind/cluster.yaml` (a control plane and a
// worker), the images loaded with `kind load`, then exactly docs/install.md:
// `kubectl apply -k manifests/`, whose installer DaemonSet puts the shim
// into each node, adds its block to kind's containerd config and restarts
// containerd. A Deployment of the test guest behind a Service then runs
// on the worker; the test reads its serial console with `kubectl logs`,
// runs a command in the guest with `kubectl exec`, reaches it through
// `kubectl port-forward` and through the Service by its DNS name from a
// pod on the other node, restarts the worker's containerd with the VM
// running (the VM must stay, the pod must not restart), scales the
// Deployment to zero (nothing may stay on the node), uninstalls as
// docs/install.md says (each node's containerd config must be byte for
// byte what kind wrote, /opt/vmpod gone) and deletes the cluster.
//
// Every file has the build tag kind: `make kind` (part of `make test`)
// runs `go test -tags kind ./test/kind`. It needs root, Docker and the
// test guest (hack/guest/build.sh); kind's CLI and kubectl come from
// $VMPOD_KIND and $VMPOD_KUBECTL or are built from go.mod's modules.
// The times of each phase are logged and written to
// _output/kind/phases.txt.
//
// Imports: internal/testenv/repo, internal/testguest and the standard
// library.
package kind
