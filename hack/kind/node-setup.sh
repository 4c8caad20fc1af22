#!/usr/bin/env bash
# Installs what the vmpod shim needs on a kind node: QEMU and libvirt's QEMU
# driver (the shim embeds libvirt), from the node's own Debian packages.
#   hack/kind/node-setup.sh [NODE]   (default vmpod-control-plane)
set -euo pipefail
node=${1:-vmpod-control-plane}
docker exec "$node" sh -euc '
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends libvirt-daemon-driver-qemu qemu-system-x86 qemu-utils >/dev/null
  getent group libvirt-qemu >/dev/null || groupadd --system libvirt-qemu
  getent passwd libvirt-qemu >/dev/null || useradd --system --no-create-home --home-dir /var/lib/libvirt \
    --shell /usr/sbin/nologin --gid libvirt-qemu libvirt-qemu
  /opt/vmpod/bin/vm-runtime --help >/dev/null
'
echo "kind/node-setup: $node can run vmpod VMs" >&2
