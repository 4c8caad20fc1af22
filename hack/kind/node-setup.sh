#!/usr/bin/env bash
# Installs what vmpod needs on a running kind node (hack/kind/node/install-qemu.sh:
# QEMU and libvirt's QEMU driver, from the node's own Debian packages),
# before `kubectl apply -k manifests/`. Not needed on a node made from
# `hack/kind/images.sh --with-qemu`'s image, which has them.
#   hack/kind/node-setup.sh [NODE]   (default vmpod-control-plane)
set -euo pipefail
node=${1:-vmpod-control-plane}
docker exec -i "$node" sh -s <"$(dirname "${BASH_SOURCE[0]}")/node/install-qemu.sh"
echo "kind/node-setup: $node can run vmpod VMs" >&2
