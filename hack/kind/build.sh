#!/usr/bin/env bash
# Builds vmpod's two images for kind and the shim the kind node mounts:
#   localhost/vmpod/vm-runtime:dev        labeller (and installer) image
#   localhost/vmpod/scheduler-plugin:dev  the VMPlacement scheduler
#   _output/kind/bin/vm-runtime           taken from the first image, with
#   _output/kind/bin/containerd-shim-vmpod-v2 the shim alone, from the same image
# Needs docker (with BuildKit). Run from anywhere; paths are the repo's.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"

log() { echo "kind/build: $*" >&2; }

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
