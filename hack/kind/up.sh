#!/usr/bin/env bash
# Creates the kind cluster of hack/kind/cluster.yaml (a control plane and a
# worker) and installs vmpod into it the way docs/install.md says, then
# waits until VM pods can run:
#   1. kind create cluster, Ready;
#   2. QEMU and libvirt's QEMU driver on each node that lacks them
#      (hack/kind/node-setup.sh: apt in the node);
#   3. kind load: localhost/vmpod/vm-runtime:dev and
#      localhost/vmpod/scheduler-plugin:dev (hack/kind/build.sh), and the
#      test guest's containerdisk when hack/guest/build.sh has made it;
#   4. kubectl apply -k manifests/: the installer DaemonSet done on every
#      node, every node labelled vmpod.io/runtime=true by the labeller, the
#      VMPlacement scheduler available.
# Each step's time goes to stderr.
#
# Usage: hack/kind/up.sh [--name NAME] [--image NODE_IMAGE] [--kubeconfig FILE] [--steps LIST]
#   --name        the cluster's name (default vmpod, cluster.yaml's)
#   --image       the node image (default kind's own; offline, the one
#                 `hack/kind/build.sh --offline` prints)
#   --kubeconfig  where kind writes the cluster's kubeconfig (default kind's:
#                 $KUBECONFIG or ~/.kube/config)
#   --steps       which of the steps above, comma-separated, of create,
#                 setup, load, install (default all four, in that order)
# Environment: KUBECTL (default kubectl), GUEST_ARCHIVE (default
# _output/guest/containerdisk.oci.tar). kind is hack/kind/kind.sh (kind,
# where `docker run --privileged` fails, without it).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"
kind=$repo/hack/kind/kind.sh
KUBECTL=${KUBECTL:-kubectl}
GUEST_ARCHIVE=${GUEST_ARCHIVE:-_output/guest/containerdisk.oci.tar}

name=vmpod image=() kubeconfig=() steps=create,setup,load,install
while (($#)); do
	case $1 in
	--name) name=${2:?--name needs a value} ;;
	--image) image=(--image "${2:?--image needs a value}") ;;
	--kubeconfig) kubeconfig=(--kubeconfig "${2:?--kubeconfig needs a value}") ;;
	--steps) steps=${2:?--steps needs a value} ;;
	*)
		echo "usage: $0 [--name NAME] [--image NODE_IMAGE] [--kubeconfig FILE] [--steps create,setup,load,install]" >&2
		exit 2
		;;
	esac
	shift 2
done

log() { echo "kind/up: $*" >&2; }
die() {
	log "error: $*"
	exit 1
}
# step LABEL CMD...: runs CMD and logs how long it took.
step() {
	local label=$1 start=$SECONDS
	shift
	log "$label"
	"$@"
	log "$label: $((SECONDS - start)) s"
}
kc() { "$KUBECTL" "${kubeconfig[@]}" "$@"; }

create() {
	"$kind" create cluster --config hack/kind/cluster.yaml --name "$name" "${image[@]}" "${kubeconfig[@]}" --wait 5m
}

nodes=()
setup_nodes() {
	for n in "${nodes[@]}"; do
		# The installer's CHECK_HOST test.
		if docker exec "$n" sh -c 'command -v qemu-system-x86_64 && ls /usr/lib*/libvirt/connection-driver/libvirt_driver_qemu.so /usr/lib*/*/libvirt/connection-driver/libvirt_driver_qemu.so 2>/dev/null | grep -q .' >/dev/null; then
			log "$n has QEMU and libvirt's QEMU driver"
		else
			hack/kind/node-setup.sh "$n"
		fi
	done
}

load() {
	"$kind" load docker-image --name "$name" localhost/vmpod/vm-runtime:dev
	if docker image inspect localhost/vmpod/scheduler-plugin:dev >/dev/null 2>&1; then
		"$kind" load docker-image --name "$name" localhost/vmpod/scheduler-plugin:dev
	else
		# build.sh --offline makes an OCI archive (Docker 20.10 cannot load those).
		"$kind" load image-archive --name "$name" _output/kind/images/scheduler-plugin.oci.tar
	fi
	if [[ -f $GUEST_ARCHIVE ]]; then
		"$kind" load image-archive --name "$name" "$GUEST_ARCHIVE"
	else
		log "no $GUEST_ARCHIVE (hack/guest/build.sh): the test guest not loaded"
	fi
}

install() {
	kc apply -k manifests/
	kc -n vmpod-system rollout status daemonset/vmpod-installer --timeout 5m
	local want=${#nodes[@]} got=0
	for ((i = 0; i < 150; i++)); do
		got=$(kc get nodes -l vmpod.io/runtime=true -o name | wc -l)
		((got == want)) && break
		sleep 2
	done
	((got == want)) || die "$got of $want nodes labelled vmpod.io/runtime=true after 5 minutes: $(kc -n vmpod-system logs daemonset/vmpod-labeller --tail 20 2>&1)"
	kc -n vmpod-system rollout status deployment/vmpod-scheduler --timeout 5m
	kc get nodes -L vmpod.io/runtime,vmpod.io/kvm >&2
}

for s in ${steps//,/ }; do
	case $s in
	create | setup | load | install) ;;
	*) die "--steps $steps: $s is not one of create, setup, load, install" ;;
	esac
done
want() { [[ ,$steps, == *,$1,* ]]; }
want create && step "kind create cluster $name" create
mapfile -t nodes < <("$kind" get nodes --name "$name")
((${#nodes[@]})) || die "cluster $name has no nodes (kind get nodes --name $name)"
want setup && step "QEMU on the nodes" setup_nodes
want load && step "kind load" load
want install && step "kubectl apply -k manifests/" install
log "cluster $name: $steps done"
