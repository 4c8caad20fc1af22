#!/usr/bin/env bash
# Installs every Debian package that building, testing and the demo need.
# Idempotent: when everything is present it changes nothing and exits quickly.
set -euo pipefail

packages=(
  # build: cgo against libvirt
  gcc make pkg-config libvirt-dev
  # the embedded QEMU driver, virt-xml-validate, QEMU itself
  libvirt-daemon-driver-qemu libvirt-clients libxml2-utils qemu-system-x86 qemu-utils qemu-system-data ovmf
  # test guest: busybox initramfs, kernel extraction, disk image
  busybox-static cpio xz-utils zstd e2fsprogs kmod
  # network namespaces, taps, tc
  iproute2
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  exit 0
fi

if [[ $(id -u) -ne 0 ]]; then
  echo "install-deps: missing packages (${missing[*]}); run as root" >&2
  exit 1
fi

echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
