#!/usr/bin/env bash
# Builds vmpod's two images for kind:
#   localhost/vmpod/vm-runtime:dev        the installer's and labeller's image
#                                         (vm-runtime, the shim, QEMU)
#   localhost/vmpod/scheduler-plugin:dev  the VMPlacement scheduler
# Needs docker (with BuildKit). Run from anywhere; paths are the repo's.
#
# hack/kind/build.sh --offline: the same without a registry (the
# Dockerfiles start FROM pulled images), and kind's node image too:
#   1. hack/kind/images.sh --with-qemu: the node image from Debian packages
#      and Go modules, with QEMU; its name is printed on stdout;
#   2. the binaries built here with go into _output/kind/bin;
#      vm-runtime's image on localhost/vmpod/kind-base:bookworm
#      (vm-runtime.offline.Dockerfile); the scheduler's by hack/ociimage
#      with its glibc libraries (_output/kind/images/scheduler-plugin.oci.tar,
#      which hack/kind/up.sh loads with kind load image-archive).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"

log() { echo "kind/build: $*" >&2; }

if [[ ${1:-} == --offline ]]; then
	node_image=$(hack/kind/images.sh --with-qemu)
	bin=_output/kind/bin
	mkdir -p "$bin" _output/kind/images
	k8s_ldflags="-X k8s.io/component-base/version.gitVersion=v1.37.2 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37"
	log "go build vm-runtime, scheduler-plugin, the shim, the jailer into $bin"
	go build -ldflags "$k8s_ldflags" -o "$bin/" ./cmd/vm-runtime ./cmd/scheduler-plugin
	CGO_ENABLED=0 go build -o "$bin/containerd-shim-vmpod-v2" ./cmd/containerd-shim-vmpod-v2
	CGO_ENABLED=0 go build -o "$bin/vmpod-qemu" ./cmd/vmpod-qemu
	log "building localhost/vmpod/vm-runtime:dev on localhost/vmpod/kind-base:bookworm"
	docker build -q -f hack/kind/vm-runtime.offline.Dockerfile -t localhost/vmpod/vm-runtime:dev "$bin" >/dev/null
	log "building localhost/vmpod/scheduler-plugin:dev"
	files=(-file "$bin/scheduler-plugin=/usr/local/bin/scheduler-plugin")
	while read -r lib; do
		files+=(-file "$(readlink -f "$lib")=$lib")
	done < <(ldd "$bin/scheduler-plugin" | grep -o '/[^ ]*' | sort -u)
	go run ./hack/ociimage -name localhost/vmpod/scheduler-plugin:dev -o _output/kind/images/scheduler-plugin.oci.tar \
		"${files[@]}" -entrypoint /usr/local/bin/scheduler-plugin -user 65532:65532
	log "images localhost/vmpod/vm-runtime:dev (docker), _output/kind/images/scheduler-plugin.oci.tar; node image:"
	echo "$node_image"
	exit 0
fi

log "building localhost/vmpod/vm-runtime:dev"
DOCKER_BUILDKIT=1 docker build -f hack/kind/vm-runtime.Dockerfile -t localhost/vmpod/vm-runtime:dev .
log "building localhost/vmpod/scheduler-plugin:dev"
DOCKER_BUILDKIT=1 docker build -f hack/kind/scheduler-plugin.Dockerfile -t localhost/vmpod/scheduler-plugin:dev .
