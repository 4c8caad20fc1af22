#!/usr/bin/env bash
# Builds vmpod's two images for kind and the shim the kind node mounts:
#   localhost/vmpod/vm-runtime:dev        labeller (and installer) image
#   localhost/vmpod/scheduler-plugin:dev  the VMPlacement scheduler
#   _output/kind/bin/vm-runtime           taken from the first image, with
#   _output/kind/bin/containerd-shim-vmpod-v2 the shim alone, from the same image
# Needs docker (with BuildKit). Run from anywhere; paths are the repo's.
#
# hack/kind/build.sh --offline: the same images without a registry (the
# Dockerfiles start FROM pulled images): the binaries built here with go,
# vm-runtime's image on localhost/vmpod/kind-base:bookworm
# (hack/kind/images.sh builds it; vm-runtime.offline.Dockerfile), the
# scheduler's by hack/ociimage with its glibc libraries
# (_output/kind/images/scheduler-plugin.oci.tar, for kind load image-archive).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"

log() { echo "kind/build: $*" >&2; }

if [[ ${1:-} == --offline ]]; then
	bin=_output/kind/bin
	mkdir -p "$bin" _output/kind/cache _output/kind/images
	k8s_ldflags="-X k8s.io/component-base/version.gitVersion=v1.37.2 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37"
	log "go build vm-runtime, scheduler-plugin, the shim into $bin"
	go build -ldflags "$k8s_ldflags" -o "$bin/" ./cmd/vm-runtime ./cmd/scheduler-plugin
	CGO_ENABLED=0 go build -o "$bin/containerd-shim-vmpod-v2" ./cmd/containerd-shim-vmpod-v2
	log "building localhost/vmpod/vm-runtime:dev on localhost/vmpod/kind-base:bookworm"
	docker build -q -f hack/kind/vm-runtime.offline.Dockerfile -t localhost/vmpod/vm-runtime:dev "$bin" >/dev/null
	log "building localhost/vmpod/scheduler-plugin:dev"
	files=(-file "$bin/scheduler-plugin=/usr/local/bin/scheduler-plugin")
	while read -r lib; do
		files+=(-file "$(readlink -f "$lib")=$lib")
	done < <(ldd "$bin/scheduler-plugin" | grep -o '/[^ ]*' | sort -u)
	go run ./hack/ociimage -name localhost/vmpod/scheduler-plugin:dev -o _output/kind/images/scheduler-plugin.oci.tar \
		"${files[@]}" -entrypoint /usr/local/bin/scheduler-plugin -user 65532:65532
	# Docker 20.10 cannot load an OCI layout archive: kind load image-archive it.
	log "shim in $bin; images localhost/vmpod/vm-runtime:dev (docker), _output/kind/images/scheduler-plugin.oci.tar"
	exit 0
fi

log "building localhost/vmpod/vm-runtime:dev"
DOCKER_BUILDKIT=1 docker build -f hack/kind/vm-runtime.Dockerfile -t localhost/vmpod/vm-runtime:dev .
log "building localhost/vmpod/scheduler-plugin:dev"
DOCKER_BUILDKIT=1 docker build -f hack/kind/scheduler-plugin.Dockerfile -t localhost/vmpod/scheduler-plugin:dev .

mkdir -p _output/kind/bin _output/kind/cache
id=$(docker create localhost/vmpod/vm-runtime:dev)
trap 'docker rm "$id" >/dev/null' EXIT
docker cp "$id:/usr/local/bin/vm-runtime" _output/kind/bin/vm-runtime
rm -f _output/kind/bin/containerd-shim-vmpod-v2
docker cp "$id:/usr/local/bin/containerd-shim-vmpod-v2" _output/kind/bin/containerd-shim-vmpod-v2
log "shim in _output/kind/bin"
