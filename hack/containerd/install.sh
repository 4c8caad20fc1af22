#!/usr/bin/env bash
# Installs the pinned containerd (containerd, ctr, containerd-shim-runc-v2) and
# crictl into BINDIR (default <repo>/_output/bin) with `go install`, and checks
# that Debian's runc and CNI plugins are present (installing them as root).
#
#   hack/containerd/install.sh [BINDIR]
#
# Idempotent and cached: when every binary is there and was built from the
# pinned module version it only checks and exits. A cold run takes a few
# minutes on 2 cores; keep the Go build cache. Progress goes to stderr.
set -euo pipefail

CONTAINERD_VERSION=v2.4.2
CRICTL_VERSION=v1.37.0

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bindir=${1:-$repo/_output/bin}
mkdir -p "$bindir"
bindir=$(cd "$bindir" && pwd)

log() { echo "containerd/install: $*" >&2; }

# Debian packages: runc (the default runtime's OCI runtime) and the CNI plugins
# (bridge, host-local, loopback, portmap in /usr/lib/cni).
# Checked by their files: dpkg-query alone costs a fifth of a second.
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

# built_from BIN MODULE VERSION: true when BIN exists and `go version -m` says
# its main module is MODULE at VERSION.
built_from() {
  [[ -x $1 ]] || return 1
  local info
  info=$(go version -m "$1" 2>/dev/null) || return 1
  grep -qE "^[[:space:]]+mod[[:space:]]+$2[[:space:]]+$3([[:space:]]|$)" <<<"$info"
}

# A stamp written after a successful install makes the warm path a few stats
# instead of four `go version -m` runs; a binary newer than the stamp (replaced
# by hand) sends it back through the full check.
stamp=$bindir/.containerd-install.stamp
want_stamp="containerd=$CONTAINERD_VERSION crictl=$CRICTL_VERSION"
bins=(containerd ctr containerd-shim-runc-v2 crictl)
stamp_fresh() {
  [[ -f $stamp && $(<"$stamp") == "$want_stamp" ]] || return 1
  local b
  for b in "${bins[@]}"; do
    [[ -x $bindir/$b && ! $bindir/$b -nt $stamp ]] || return 1
  done
}
stamp_fresh && exit 0

# Parallel test packages may call this at once: one builds, the others wait
# and then find the stamp.
exec 9>"$bindir/.containerd-install.lock"
flock 9
stamp_fresh && exit 0

export GOBIN=$bindir GOTOOLCHAIN=${GOTOOLCHAIN:-local} GOFLAGS=${GOFLAGS:--buildvcs=false}
# Outside any module: `go install pkg@version` builds the pinned module graph,
# never this repository's go.mod.
cd /

need=false
for b in containerd ctr containerd-shim-runc-v2; do
  built_from "$bindir/$b" github.com/containerd/containerd/v2 "$CONTAINERD_VERSION" || need=true
done
if $need; then
  log "building containerd $CONTAINERD_VERSION (containerd, ctr, containerd-shim-runc-v2) into $bindir; a few minutes cold"
  start=$SECONDS
  go install \
    "github.com/containerd/containerd/v2/cmd/containerd@$CONTAINERD_VERSION" \
    "github.com/containerd/containerd/v2/cmd/ctr@$CONTAINERD_VERSION" \
    "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$CONTAINERD_VERSION"
  log "containerd built in $((SECONDS - start))s"
fi

if ! built_from "$bindir/crictl" sigs.k8s.io/cri-tools "$CRICTL_VERSION"; then
  log "building crictl $CRICTL_VERSION into $bindir"
  start=$SECONDS
  go install "sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION"
  log "crictl built in $((SECONDS - start))s"
fi

for b in "${bins[@]}"; do
  built_from "$bindir/$b" "$([[ $b == crictl ]] && echo sigs.k8s.io/cri-tools || echo github.com/containerd/containerd/v2)" \
    "$([[ $b == crictl ]] && echo "$CRICTL_VERSION" || echo "$CONTAINERD_VERSION")" ||
    { log "$bindir/$b is not the pinned version after install"; exit 1; }
done
echo "$want_stamp" >"$stamp"
log "ready: $bindir/{containerd,ctr,containerd-shim-runc-v2,crictl}"
