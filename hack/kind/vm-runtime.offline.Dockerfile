# localhost/vmpod/vm-runtime:dev without a registry (hack/kind/build.sh
# --offline): vm-runtime.Dockerfile's image, on the base of the kind node
# image hack/kind/images.sh builds (Debian 12, as this machine, whose
# libvirt the binaries link) instead of a pulled Debian, with the binaries
# built on this machine. The build context is _output/kind/bin.
ARG BASE=localhost/vmpod/kind-base:bookworm
FROM ${BASE}
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        libvirt-daemon-driver-qemu libvirt-daemon qemu-system-x86 qemu-utils util-linux ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && (getent group libvirt-qemu || groupadd --system libvirt-qemu) \
    && (getent passwd libvirt-qemu || useradd --system --no-create-home --home-dir /var/lib/libvirt \
        --shell /usr/sbin/nologin --gid libvirt-qemu libvirt-qemu)
# libvirt 9.0's embedded QEMU driver makes this state dir outside its
# embed root, and the labeller's root filesystem is read-only.
RUN mkdir -p /run/libvirt/hostdevmgr
COPY vm-runtime vmpod-qemu containerd-shim-vmpod-v2 /usr/local/bin/
ENTRYPOINT ["vm-runtime"]
