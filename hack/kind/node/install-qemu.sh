#!/bin/sh
# What a kind node needs to run vmpod VMs, from the node's own Debian
# packages: QEMU, qemu-img and libvirt's QEMU driver (the shim embeds
# libvirt), and the libvirt-qemu user. The vmpod installer refuses a node
# without them (CHECK_HOST). Run inside the node, as root:
#   by hack/kind/node-setup.sh on a running node (kind's stock node image),
#   by hack/kind/images.sh --with-qemu into an image (the tests' node image).
set -eu
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends libvirt-daemon-driver-qemu libvirt-daemon qemu-system-x86 qemu-utils >/dev/null
rm -rf /var/lib/apt/lists/*
getent group libvirt-qemu >/dev/null || groupadd --system libvirt-qemu
getent passwd libvirt-qemu >/dev/null || useradd --system --no-create-home --home-dir /var/lib/libvirt \
	--shell /usr/sbin/nologin --gid libvirt-qemu libvirt-qemu
