#!/usr/bin/env bash
# Builds what boots a cgroup v2 + systemd node as a VM over this machine's
# own root (see internal/testenv/nodevm):
#   vmlinux      the test guest's kernel (hack/guest/build.sh), copied
#   initrd.img   busybox-static initramfs whose /init (./init) mounts the
#                host root read-only over virtio-9p under an overlay with a
#                tmpfs upper, mounts the read-write share, adds ./overlay
#                (the units that run the test), the unit masks (./masks) and
#                generator masks (all but ./generators), and switch_roots
#                into systemd
#   modules/     the kernel's modules with their modules.dep; /init binds
#                them at /lib/modules/<version> in the node, so the node
#                loads what it needs on demand (bridge, veth, tun, tc
#                actions for pod networks)
#   nodevm.env   KERNEL_VERSION=...
#
# Usage: hack/nodevm/build.sh [OUTDIR]   (default <repo>/_output/nodevm)
# The kernel comes from $VMPOD_GUEST_DIR (default <repo>/_output/guest),
# built there by hack/guest/build.sh if it is missing.
# Progress goes to stderr; OUTDIR's absolute path is printed on stdout.
# Cached: does nothing if the outputs are newer than this directory's files
# and the guest's kernel.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=${1:-$repo/_output/nodevm}
guest=${VMPOD_GUEST_DIR:-$repo/_output/guest}

# guest_copy_modules
# shellcheck source=../guest/build.sh
source "$repo/hack/guest/build.sh"

# What /init needs to reach the host root and build the overlay; the rest of
# what the node uses is built into Debian's kernel (cgroup2, 8250 serial,
# devtmpfs, tmpfs). 9pnet_virtio is no symbol dependency of 9p (the
# transport is looked up at mount time), hence named here.
modules=(virtio_pci 9pnet_virtio 9p overlay)

log() { echo "nodevm: $*" >&2; }
die() {
	echo "nodevm: error: $*" >&2
	exit 1
}

outputs=(vmlinux initrd.img modules nodevm.env)

# nodevm.env is written last, so it doubles as the stamp of a complete build.
uptodate() {
	local f
	for f in "${outputs[@]}"; do [[ -e $out/$f ]] || return 1; done
	[[ -z $(find "$here" "$guest/guest.env" -newer "$out/nodevm.env" -print -quit) ]]
}

if [[ ! -f $guest/guest.env ]]; then
	log "no test guest in $guest; building it"
	"$repo/hack/guest/build.sh" "$guest" >/dev/null
fi
guest=$(cd "$guest" && pwd)

mkdir -p "$out"
out=$(cd "$out" && pwd)
if uptodate; then
	log "up to date in $out"
	echo "$out"
	exit 0
fi

for p in busybox-static cpio kmod systemd dbus; do
	[[ $(dpkg-query -W -f='${Status}' "$p" 2>/dev/null) == "install ok installed" ]] ||
		die "Debian package $p is not installed (run hack/install-deps.sh)"
done

# Concurrent callers (parallel test packages) wait for one build to finish.
exec 9>"$out/.lock"
flock 9
if uptodate; then
	log "up to date in $out (built by another caller)"
	echo "$out"
	exit 0
fi
tmp=$(mktemp -d "$out/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

kver=$(sed -n 's/^KERNEL_VERSION=//p' "$guest/guest.env")
[[ -n $kver ]] || die "no KERNEL_VERSION in $guest/guest.env"
deb=$(find "$guest" -maxdepth 1 -name "linux-image-${kver}_*_amd64.deb" -print -quit)
[[ -n $deb ]] || die "no linux-image-$kver .deb in $guest (delete guest.env there and rebuild)"

log "unpacking $(basename "$deb") ..."
kroot=$tmp/kernel
dpkg-deb -x "$deb" "$kroot"
depmod -b "$kroot" "$kver" # the .deb ships no modules.dep (postinst makes it)

log "building initramfs ..."
ir=$tmp/initramfs
mkdir -p "$ir"/{bin,sbin,usr/bin,usr/sbin,proc,sys,dev,lib/modules}
cp /bin/busybox "$ir/bin/busybox"
busybox --list-full | while read -r applet; do
	[[ -e $ir/$applet ]] || ln -s /bin/busybox "$ir/$applet"
done
install -m 0755 "$here/init" "$ir/init"
# What /init copies into the root's overlay: our units and their program,
# default.target, and the masks as systemd spells them (links to /dev/null).
cp -R "$here/overlay" "$ir/overlay"
chmod 0755 "$ir/overlay/usr/local/libexec/vmpod-nodevm-run"
units=$ir/overlay/etc/systemd/system
ln -s vmpod-nodevm.target "$units/default.target"
names() { sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$1"; }
names "$here/masks" | while read -r u; do ln -s /dev/null "$units/$u"; done
names "$here/generators" | tr '\n' ' ' >"$ir/generators"
guest_copy_modules "$kroot" "$kver" "$ir/lib/modules" "${modules[@]}" ||
	die "cannot collect the kernel modules"
log "initramfs modules: $(tr '\n' ' ' <"$ir/lib/modules/load.list")"
# The node's own modules: /init binds $out/modules (seen through the host
# root) at /lib/modules/$kver.
printf '%s\n' "$kver" >"$ir/kernel.version"
printf '%s\n' "$out/modules" >"$ir/modules.path"
mv "$kroot/lib/modules/$kver" "$tmp/modules"

# Reproducible, as hack/guest/build.sh's.
find "$ir" -exec touch -h -d @0 {} +
(cd "$ir" && find . -print0 | LC_ALL=C sort -z |
	cpio --null --quiet -o -H newc -R 0:0 --reproducible) | gzip -n -1 >"$tmp/initrd.img"

cp "$guest/vmlinux" "$tmp/vmlinux"
printf 'KERNEL_VERSION=%s\n' "$kver" >"$tmp/nodevm.env"
for f in "${outputs[@]}"; do
	rm -rf "${out:?}/$f"
	mv "$tmp/$f" "$out/$f"
done
log "done: $out"
echo "$out"
