#!/usr/bin/env bash
# Installs every Debian package that building, testing and the demo need.
# Idempotent: when everything is present it changes nothing and exits quickly.
set -euo pipefail

packages=(
  # build: cgo against libvirt
  gcc make pkg-config libvirt-dev
  # the embedded QEMU driver, virt-xml-validate, QEMU itself
  libvirt-daemon-driver-qemu libvirt-clients libxml2-utils qemu-system-x86 qemu-utils qemu-system-data ovmf
  # what libvirt's checkpoints and restores need in the embedded driver: its
  # iohelper (writes a domain's memory) and storage-file module (a snapshot's
  # new disk layer); nothing of it starts (no units, no maintainer scripts)
  libvirt-daemon
  # test guest: busybox initramfs, kernel extraction, disk image
  busybox-static cpio xz-utils zstd e2fsprogs kmod socat
  # the shared libraries of the test guest's QEMU guest agent (build.sh
  # downloads the qemu-guest-agent .deb and copies them from this machine)
  libglib2.0-0 libnuma1 libudev1 liburing2
  # checks the KVM probe payload (pkg/node/kvmprobe.asm) against its embedded bytes
  nasm
  # containerd tests: runc for plain pods, CNI plugins, nsenter/unshare
  runc containernetworking-plugins util-linux
  # containerd's CRI refuses CheckpointContainer unless CRIU is installed,
  # whatever the runtime: vmpod never runs it (docs/day2.md)
  criu
  # reads back the cloud-init seed in tests (an independent ISO 9660 reader)
  xorriso
  # network namespaces, taps, tc
  iproute2
  # kube-proxy's iptables mode in the local cluster's node namespaces
  iptables
  # the cgroup v2 node VM (hack/nodevm) boots this machine's root with systemd
  # as PID 1 and needs D-Bus for the systemd cgroup driver. Harmless on a
  # machine without systemd as PID 1: systemd's maintainer scripts only enable
  # units offline (they act only when /run/systemd/system exists), and dbus's
  # postinst start goes through invoke-rc.d, which these machines' policy-rc.d
  # (exit 101) denies; elsewhere it starts a system dbus-daemon, nothing more.
  systemd dbus
  # kind's node image, built offline (hack/kind/images.sh): a Debian root
  # by debootstrap, jq for its containerd base spec (Docker itself is on
  # every machine of this project; test/kind says so where it is not)
  debootstrap jq
  # the node API's Go code is generated from api/**/*.proto (hack/gen-api.sh,
  # checked by api/node/v1's test)
  protobuf-compiler libprotobuf-dev
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

# libvirt's QEMU driver looks up the user and group it was built with
# (libvirt-qemu:libvirt-qemu in Debian's build) when it initialises, before it reads
# qemu.conf, even though vmpod runs QEMU as root. Debian creates them in
# libvirt-daemon-system, which would also install a system libvirtd that
# vmpod does not use, so create just the two, as that package does.
ensure_qemu_user() {
  getent group libvirt-qemu >/dev/null || groupadd --system libvirt-qemu
  getent passwd libvirt-qemu >/dev/null ||
    useradd --system --no-create-home --home-dir /var/lib/libvirt --shell /usr/sbin/nologin \
      --gid libvirt-qemu --comment "Libvirt Qemu" libvirt-qemu
}

if ((${#missing[@]} == 0)); then
  ensure_qemu_user
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
ensure_qemu_user
