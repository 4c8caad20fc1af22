#!/usr/bin/env bash
# Builds the pinned critest (cri-tools' CRI validation suite) into BINDIR
# (default <repo>/_output/bin), from the module cache through the Go module
# proxy, for test/cri's TestCritest.
#
#   hack/critest/install.sh [BINDIR]
#
# critest is a Go test binary (cmd/critest holds only _test.go files), so
# `go install sigs.k8s.io/cri-tools/cmd/critest@VERSION` cannot build it:
# this downloads the pinned module (go mod download) and builds it there
# with `go test -c`, as cri-tools' own Makefile does, stamping the version
# into the binary. Idempotent: a critest whose build info names the pinned
# version is kept. About 30 s warm, a few minutes cold on 2 cores; keep the
# Go build cache. Progress goes to stderr.
set -euo pipefail

CRITOOLS_VERSION=v1.37.0

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bindir=${1:-$repo/_output/bin}
mkdir -p "$bindir"
bindir=$(cd "$bindir" && pwd)
bin=$bindir/critest
ldflag="-X sigs.k8s.io/cri-tools/pkg/version.Version=$CRITOOLS_VERSION"

log() { echo "critest/install: $*" >&2; }

# built: the binary's build info carries the pinned version's ldflag.
built() {
  [[ -x $bin ]] && go version -m "$bin" 2>/dev/null | grep -qF -- "$ldflag"
}
built && exit 0

# Parallel callers (test packages, make) build once.
exec 9>"$bindir/.critest-install.lock"
flock 9
built && exit 0

export GOTOOLCHAIN=${GOTOOLCHAIN:-local} GOFLAGS=${GOFLAGS:--buildvcs=false}
start=$SECONDS
log "building critest $CRITOOLS_VERSION into $bindir"
# Outside any module: the download and the build use cri-tools' own
# go.mod and go.sum, never this repository's.
cd /
dir=$(go mod download -json "sigs.k8s.io/cri-tools@$CRITOOLS_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[[ -n $dir && -d $dir ]] || { log "go mod download sigs.k8s.io/cri-tools@$CRITOOLS_VERSION gave no dir"; exit 1; }
cd "$dir"
go test -c -o "$bin.tmp" -ldflags "$ldflag" ./cmd/critest
mv "$bin.tmp" "$bin"
built || { log "$bin does not carry $CRITOOLS_VERSION after the build"; exit 1; }
log "critest built in $((SECONDS - start))s"
