#!/usr/bin/env bash
# Builds the local cluster's own small images, so that nothing is pulled:
#   coredns.oci.tar  $COREDNS_IMAGE: CoreDNS v1.15.0 built from its
#                    Go module (hack/coredns, a module of its own) with the
#                    cluster-DNS plugins only, run as 65532
#   busybox.oci.tar  $BUSYBOX_IMAGE: Debian's busybox-static as
#                    /bin/busybox and /bin/sh, an ordinary (runc) pod's
#                    shell for the e2e tests (nc, nslookup, sleep)
# Usage: hack/local/images.sh [OUTDIR]   (default <repo>/_output/images)
# Progress goes to stderr; the archives' absolute paths are printed on
# stdout, one a line, in the order above. Each is rebuilt only when an
# input is newer (a cold CoreDNS build takes about 9 minutes on 2 cores).
set -euo pipefail

# shellcheck source=hack/local/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" # COREDNS_IMAGE, BUSYBOX_IMAGE, repo
out=${1:-$repo/_output/images}
mkdir -p "$out"
out=$(cd "$out" && pwd)
log() { echo "images: $*" >&2; }
# stale ARCHIVE INPUT...: the archive is missing or older than an input.
stale() {
	local a=$1
	shift
	[[ ! -f $a || -n $(find "$@" -newer "$a" -print -quit) ]]
}
# Concurrent callers wait for one build.
exec 9>"$out/.lock"
flock 9
cd "$repo"

if stale "$out/coredns.oci.tar" hack/coredns hack/ociimage; then
	log "building CoreDNS v1.15.0 from its module (hack/coredns; cold: about 9 minutes)"
	(cd hack/coredns && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$out/coredns.tmp" .)
	mv "$out/coredns.tmp" "$out/coredns"
	go run ./hack/ociimage -name "$COREDNS_IMAGE" -o "$out/coredns.oci.tar" -file "$out/coredns=/coredns" \
		-entrypoint /coredns -user 65532:65532
fi
echo "$out/coredns.oci.tar"

if stale "$out/busybox.oci.tar" /bin/busybox hack/ociimage; then
	log "packaging $BUSYBOX_IMAGE from /bin/busybox (busybox-static)"
	go run ./hack/ociimage -name "$BUSYBOX_IMAGE" -o "$out/busybox.oci.tar" -file /bin/busybox=/bin/busybox \
		-link bin/sh=busybox -entrypoint /bin/sh
fi
echo "$out/busybox.oci.tar"
