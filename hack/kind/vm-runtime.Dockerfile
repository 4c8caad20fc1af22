# The node image of vmpod: vm-runtime (the labeller, the installer's
# payload), vmpod-qemu (QEMU's jailer) and containerd-shim-vmpod-v2 (the
# shim alone) with the
# libvirt QEMU driver and QEMU it runs, on the Debian release kind's node
# image is built on, so the binary the kind node mounts (extracted by
# hack/kind/build.sh) finds the same libraries there. Build from the
# repository root:
#   docker build -f hack/kind/vm-runtime.Dockerfile -t localhost/vmpod/vm-runtime:dev .
ARG DEBIAN=trixie

FROM golang:1.26-${DEBIAN} AS build
RUN apt-get update && apt-get install -y --no-install-recommends gcc libvirt-dev pkg-config \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/root/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    go build -trimpath -o /out/vm-runtime ./cmd/vm-runtime \
    && CGO_ENABLED=0 go build -trimpath -o /out/containerd-shim-vmpod-v2 ./cmd/containerd-shim-vmpod-v2 \
    && CGO_ENABLED=0 go build -trimpath -o /out/vmpod-qemu ./cmd/vmpod-qemu

FROM debian:${DEBIAN}-slim
# util-linux: nsenter for the installer. libvirt's QEMU driver looks up the
# libvirt-qemu user at start although vmpod runs QEMU as root; Debian makes
# it in libvirt-daemon-system, which would bring a libvirtd vmpod never uses.
RUN apt-get update && apt-get install -y --no-install-recommends \
        libvirt-daemon-driver-qemu libvirt-daemon qemu-system-x86 qemu-utils util-linux ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && (getent group libvirt-qemu || groupadd --system libvirt-qemu) \
    && (getent passwd libvirt-qemu || useradd --system --no-create-home --home-dir /var/lib/libvirt \
        --shell /usr/sbin/nologin --gid libvirt-qemu libvirt-qemu)
COPY --from=build /out/vm-runtime /out/vmpod-qemu /out/containerd-shim-vmpod-v2 /usr/local/bin/
ENTRYPOINT ["vm-runtime"]
