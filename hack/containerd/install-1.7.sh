#!/usr/bin/env bash
# Installs containerd 1.7 (containerd and ctr, pinned below) and crictl into
# BINDIR (default <repo>/_output/containerd-1.7/bin), for the tests that run
# vmpod under containerd 1.7 (task API v2). Debian's runc and CNI plugins
# are checked (installed as root) as by install.sh.
#
#   hack/containerd/install-1.7.sh [BINDIR]
#
# containerd 1.7's go.mod has an exclude directive, so `go install
# ...@v1.7.35` is refused ("must not contain directives that would cause it
# to be interpreted differently than if it were the main module"). Instead
# the module's source is fetched with `go mod download` (checked against
# go.sum like any module) and built as the main module, with its own go.mod
# and go.sum: the exact dependency graph containerd 1.7.35 ships with.
# The runc shim is not built: the vmpod tests run no runc container.
#
# Idempotent and cached by a stamp. A cold run takes about two minutes on 2
# cores; keep the Go build cache. Progress goes to stderr.
set -euo pipefail

CONTAINERD_VERSION=v1.7.35
CRICTL_VERSION=v1.37.0
MODULE=github.com/containerd/containerd

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bindir=${1:-$repo/_output/containerd-1.7/bin}
mkdir -p "$bindir"
bindir=$(cd "$bindir" && pwd)

log() { echo "containerd-1.7/install: $*" >&2; }

deb_missing=()
command -v runc >/dev/null || deb_missing+=(runc)
[[ -x /usr/lib/cni/bridge && -x /usr/lib/cni/host-local && -x /usr/lib/cni/loopback ]] ||
  deb_missing+=(containernetworking-plugins)
if ((${#deb_missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    log "missing Debian packages: ${deb_missing[*]}; run as root or: apt-get install ${deb_missing[*]}"
    exit 1
  fi
  log "installing Debian packages: ${deb_missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${deb_missing[@]}" >/dev/null
fi

stamp=$bindir/.containerd-install.stamp
want_stamp="containerd=$CONTAINERD_VERSION crictl=$CRICTL_VERSION"
bins=(containerd ctr crictl)
stamp_fresh() {
  [[ -f $stamp && $(<"$stamp") == "$want_stamp" ]] || return 1
  local b
  for b in "${bins[@]}"; do
    [[ -x $bindir/$b && ! $bindir/$b -nt $stamp ]] || return 1
  done
}
stamp_fresh && exit 0

exec 9>"$bindir/.containerd-install.lock"
flock 9
stamp_fresh && exit 0

export GOTOOLCHAIN=${GOTOOLCHAIN:-local} GOFLAGS=${GOFLAGS:--buildvcs=false}

# reports BIN VERSION: containerd and ctr print "<name> <module> <version> <revision>".
reports() {
  [[ -x $1 ]] || return 1
  local name mod ver
  read -r name mod ver _ < <("$1" --version 2>/dev/null) || return 1
  [[ $mod == "$MODULE" && $ver == "$2" ]]
}

if ! reports "$bindir/containerd" "$CONTAINERD_VERSION" || ! reports "$bindir/ctr" "$CONTAINERD_VERSION"; then
  log "building containerd $CONTAINERD_VERSION (containerd, ctr) into $bindir; about two minutes cold"
  start=$SECONDS
  src=$(cd / && go mod download -json "$MODULE@$CONTAINERD_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [[ -n $src && -f $src/go.mod ]] || { log "go mod download $MODULE@$CONTAINERD_VERSION gave no source dir"; exit 1; }
  # The module cache is read-only; build a writable copy, removed after.
  work=$(mktemp -d)
  trap 'chmod -R u+w "$work"; rm -rf "$work"' EXIT
  cp -r "$src/." "$work/"
  chmod -R u+w "$work"
  (cd "$work" && go build -trimpath -o "$bindir/" \
    -ldflags "-X $MODULE/version.Version=$CONTAINERD_VERSION" ./cmd/containerd ./cmd/ctr)
  log "containerd built in $((SECONDS - start))s"
fi

# crictl speaks CRI v1, which containerd 1.7 serves.
crictl_ok() {
  go version -m "$bindir/crictl" 2>/dev/null |
    grep -qE "^[[:space:]]+mod[[:space:]]+sigs.k8s.io/cri-tools[[:space:]]+$CRICTL_VERSION([[:space:]]|$)"
}
if ! crictl_ok; then
  log "building crictl $CRICTL_VERSION into $bindir"
  (cd / && GOBIN=$bindir go install "sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION")
fi

for b in containerd ctr; do
  reports "$bindir/$b" "$CONTAINERD_VERSION" || { log "$bindir/$b is not $CONTAINERD_VERSION after install"; exit 1; }
done
crictl_ok || { log "$bindir/crictl is not $CRICTL_VERSION after install"; exit 1; }
echo "$want_stamp" >"$stamp"
log "ready: $bindir/{containerd,ctr,crictl}"
