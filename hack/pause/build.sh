#!/usr/bin/env bash
# Builds vmpod's own pause image, so no test pulls one:
#   pause          the static pause binary (hack/pause/main.go, CGO_ENABLED=0)
#   pause.oci.tar  OCI image-layout archive of it, named $IMAGE below, for
#                  `ctr -n k8s.io images import` and containerd's pinned sandbox image
#
# Usage: hack/pause/build.sh [OUTDIR]   (default <repo>/_output/pause)
# Progress goes to stderr; the archive's absolute path is printed on stdout.
# Cached: does nothing if the archive is newer than every file in hack/pause.
set -euo pipefail

IMAGE=localhost/vmpod/pause:v1

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=${1:-$repo/_output/pause}
mkdir -p "$out"
out=$(cd "$out" && pwd)
archive=$out/pause.oci.tar

log() { echo "pause: $*" >&2; }
uptodate() { [[ -f $archive && -z $(find "$here" -newer "$archive" -print -quit) ]]; }

if uptodate; then
  echo "$archive"
  exit 0
fi
# Concurrent callers (parallel test packages) wait for one build.
exec 9>"$out/.lock"
flock 9
if uptodate; then
  echo "$archive"
  exit 0
fi

log "building $IMAGE into $out"
cd "$repo"
CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$out/pause.tmp" ./hack/pause
mv "$out/pause.tmp" "$out/pause"
go run ./hack/ociimage -name "$IMAGE" -o "$archive" -file "$out/pause=/pause" -entrypoint /pause -user 65535:65535
log "wrote $archive"
echo "$archive"
