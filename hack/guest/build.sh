#!/usr/bin/env bash
# Builds the vmpod test guest from Debian packages, without installing a
# kernel on this machine:
#   vmlinuz                the Debian kernel (bzImage)
#   vmlinux                the same kernel uncompressed: an ELF with a PVH note
#                          that QEMU enters directly (much faster under TCG)
#   initrd.img             busybox-static initramfs; /init is rootfs/init; with
#                          Debian's qemu-ga (the QEMU guest agent) and the
#                          shared libraries it links, and a small pgrep
#                          (rootfs/usr/bin; busybox-static has none)
#   disk.qcow2             16 MiB ext4 with hello.txt
#   containerdisk.oci.tar  OCI image-layout archive of all of it (KubeVirt's
#                          containerdisk layout), for `ctr images import`
#   guest.env              KERNEL_VERSION=... IMAGE=...
#
# Usage: hack/guest/build.sh [OUTDIR]   (default <repo>/_output/guest)
# Progress goes to stderr; OUTDIR's absolute path is printed on stdout.
# Cached: does nothing if the outputs are newer than this directory's files.
# The kernel and qemu-guest-agent .debs are kept in OUTDIR; delete them to
# pick up newer ones.
set -euo pipefail

# --- shared with hack/nodevm/build.sh, which sources this file ---------------

# guest_copy_modules KROOT KVER DIR MODULE...: copies MODULEs and everything
# they depend on from the unpacked kernel package KROOT (depmod already run)
# into DIR as plain NAME.ko, and appends the names, in the order insmod must
# load them, to DIR/load.list.
guest_copy_modules() {
	local kroot=$1 kver=$2 dir=$3 m verb path name deps
	shift 3
	deps=$dir/.deps # in the caller's build dir, removed with it on error
	# modprobe --show-depends prints the insmod commands in load order,
	# softdeps included (ext4 needs crc32c through the crypto API, not a
	# symbol).
	for m in "$@"; do
		modprobe -d "$kroot" -S "$kver" --show-depends "$m" >>"$deps" || {
			echo "module $m not found in $kver" >&2
			return 1
		}
	done
	local -A seen=()
	while read -r verb path _; do
		[[ $verb == insmod ]] || continue # "builtin X": nothing to load
		# Arch-optimised crypto (crc32c-intel) needs CPU features that TCG's
		# default CPU lacks; the generic implementations are in the list too.
		[[ $path == */kernel/arch/x86/crypto/* ]] && continue
		name=$(basename "$path")
		name=${name%%.ko*}
		[[ -n ${seen[$name]:-} ]] && continue
		seen[$name]=1
		case $path in
		*.ko.xz) xz -dc "$path" >"$dir/$name.ko" || return 1 ;;
		*.ko.zst) zstd -qdc "$path" >"$dir/$name.ko" || return 1 ;;
		*.ko) cp "$path" "$dir/$name.ko" || return 1 ;;
		*)
			echo "unexpected module file $path" >&2
			return 1
			;;
		esac
		echo "$name" >>"$dir/load.list"
	done <"$deps"
	rm -f "$deps"
}

# Sourced for the functions above: stop here.
[[ ${BASH_SOURCE[0]} == "$0" ]] || return 0

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=${1:-$repo/_output/guest}
[[ -d $out ]] && out=$(cd "$out" && pwd)
image=localhost/vmpod/test-guest:v1

# Modules /init loads, in this order, each after its dependencies (resolved
# below). The ACPI power button comes first so that a shutdown request during
# the rest of the boot is not lost. pvpanic-mmio drives the VM's ISA pvpanic
# device (ACPI QEMU0001): a guest kernel panic then tells QEMU, which ends
# the VM (no udev here to load it by its ACPI alias). isofs (which pulls in
# cdrom for its multisession helpers) reads the cloud-init seed, whose
# vmpod-shares file lists the pod's volumes, and virtiofs (over fuse) mounts
# them. virtio_mem takes the RAM a live resize plugs (vmpod.io/max-memory);
# the kernel onlines it because the runtime's command line says
# memhp_default_state=online_movable. Everything else the guest needs is built into Debian's kernel: the
# 8250 serial console, devtmpfs, AF_PACKET (udhcpc), unix sockets, IPv4, the
# initramfs decompressors, magic SysRq (/proc/sysrq-trigger).
modules=(button evdev pvpanic-mmio virtio_pci virtio_blk virtio_net virtio_console ext4 isofs fuse virtiofs virtio_mem)

log() { echo "guest: $*" >&2; }
die() {
	echo "guest: error: $*" >&2
	exit 1
}

outputs=(vmlinuz vmlinux initrd.img disk.qcow2 containerdisk.oci.tar guest.env)

# guest.env is written last, so it doubles as the stamp of a complete build.
uptodate() {
	local f
	for f in "${outputs[@]}"; do [[ -f $out/$f ]] || return 1; done
	[[ -z $(find "$here" -newer "$out/guest.env" -print -quit) ]]
}

if uptodate; then
	log "up to date in $out"
	echo "$out"
	exit 0
fi

# qemu-ga's libraries are copied from this machine (found with ldd), so the
# packages that ship them must be installed; the agent itself only comes as a
# downloaded .deb.
for p in busybox-static cpio xz-utils zstd e2fsprogs qemu-utils kmod \
	libglib2.0-0 libnuma1 libudev1 liburing2; do
	[[ $(dpkg-query -W -f='${Status}' "$p" 2>/dev/null) == "install ok installed" ]] ||
		die "Debian package $p is not installed (run hack/install-deps.sh)"
done
command -v go >/dev/null || die "go is not in PATH"

mkdir -p "$out"
out=$(cd "$out" && pwd)
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

# --- kernel ---------------------------------------------------------------
kpkg=$(apt-cache depends linux-image-amd64 2>/dev/null |
	awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9]/ { print $2; exit }')
[[ -n $kpkg ]] || die "cannot resolve linux-image-amd64 (try apt-get update)"

# fetch_deb PKG: prints the path of PKG's .deb in OUTDIR, downloading it
# first if OUTDIR has none.
fetch_deb() {
	local pkg=$1 deb
	deb=$(find "$out" -maxdepth 1 -name "${pkg}_*_amd64.deb" -print -quit)
	if [[ -z $deb ]]; then
		log "downloading $pkg ..."
		# As root apt drops to the _apt user for downloads, which cannot write
		# into our private temp dir.
		local aptopt=()
		[[ $EUID -eq 0 ]] && aptopt=(-o APT::Sandbox::User=root)
		if ! (cd "$tmp" && apt-get download -q "${aptopt[@]}" "$pkg" >/dev/null 2>&1); then
			log "download failed; running apt-get update ..."
			apt-get update -qq >&2
			(cd "$tmp" && apt-get download -q "${aptopt[@]}" "$pkg" >/dev/null) || return 1
		fi
		mv "$tmp"/"${pkg}"_*_amd64.deb "$out"/ || return 1
		deb=$(find "$out" -maxdepth 1 -name "${pkg}_*_amd64.deb" -print -quit)
	fi
	[[ -n $deb ]] && echo "$deb"
}

# A new kernel package name (a new ABI) leaves the old .deb behind; drop it.
find "$out" -maxdepth 1 -name 'linux-image-*.deb' ! -name "${kpkg}_*" -delete
deb=$(fetch_deb "$kpkg") || die "cannot download $kpkg"

log "unpacking $(basename "$deb") ..."
kroot=$tmp/kernel
dpkg-deb -x "$deb" "$kroot"
kver=${kpkg#linux-image-}
[[ -f $kroot/boot/vmlinuz-$kver ]] || die "no boot/vmlinuz-$kver in $deb"
cp "$kroot/boot/vmlinuz-$kver" "$tmp/vmlinuz"

# --- vmlinux: the xz stream inside the bzImage ------------------------------
# Like the kernel's scripts/extract-vmlinux: try each offset where the xz
# magic appears until one decompresses to an ELF. xz complains about the
# bytes after the stream, hence 2>/dev/null and no exit-status check.
log "extracting vmlinux ..."
grep -q '^CONFIG_KERNEL_XZ=y' "$kroot/boot/config-$kver" ||
	die "kernel $kver is not xz-compressed; extend build.sh"
is_elf() { [[ $(head -c4 "$1" | od -An -c | tr -d ' ') == '177ELF' ]]; }
while IFS=: read -r off _; do
	tail -c "+$((off + 1))" "$tmp/vmlinuz" | xz -dc >"$tmp/vmlinux" 2>/dev/null || true
	is_elf "$tmp/vmlinux" && break
done < <(LC_ALL=C grep -abo $'\xfd7zXZ' "$tmp/vmlinuz")
is_elf "$tmp/vmlinux" || die "no ELF kernel inside the bzImage"
# Type 0x12 is XEN_ELFNOTE_PHYS32_ENTRY, the PVH entry point QEMU looks for.
# (readelf is optional: binutils comes with gcc.)
if command -v readelf >/dev/null &&
	! readelf -n "$tmp/vmlinux" | grep -E 'Xen[[:space:]].*note type: \(0x00000012\)' >/dev/null; then
	die "vmlinux has no PVH entry note; QEMU cannot boot it with -kernel"
fi

# --- initramfs ----------------------------------------------------------------
log "building initramfs ..."
depmod -b "$kroot" "$kver" # the .deb ships no modules.dep (postinst makes it)
ir=$tmp/initramfs
mkdir -p "$ir"/{bin,sbin,usr/bin,usr/sbin,etc,proc,sys,dev,mnt,run,tmp,lib/modules}
cp /bin/busybox "$ir/bin/busybox"
busybox --list-full | while read -r applet; do
	[[ -e $ir/$applet ]] || ln -s /bin/busybox "$ir/$applet"
done
cp -R "$here/rootfs/." "$ir/"
chmod 0755 "$ir/init" "$ir/bin/http-reply" "$ir/bin/guest-poweroff" \
	"$ir/etc/udhcpc.script" "$ir/etc/acpi/PWRF/00000080" "$ir/usr/bin/pgrep"

guest_copy_modules "$kroot" "$kver" "$ir/lib/modules" "${modules[@]}" ||
	die "cannot collect the kernel modules"
log "initramfs modules: $(tr '\n' ' ' <"$ir/lib/modules/load.list")"

# The QEMU guest agent (kubectl exec goes through it), from Debian's package,
# with the shared libraries and the loader it needs at the same paths as
# here. Debian's libraries come stripped already.
qga_deb=$(fetch_deb qemu-guest-agent) || die "cannot download qemu-guest-agent"
dpkg-deb -x "$qga_deb" "$tmp/qga"
[[ -x $tmp/qga/usr/sbin/qemu-ga ]] || die "no usr/sbin/qemu-ga in $qga_deb"
cp "$tmp/qga/usr/sbin/qemu-ga" "$ir/usr/sbin/qemu-ga"
ldd "$tmp/qga/usr/sbin/qemu-ga" >"$tmp/qga.ldd" || die "ldd qemu-ga failed"
! grep -q 'not found' "$tmp/qga.ldd" ||
	die "qemu-ga needs libraries this machine lacks (run hack/install-deps.sh): $(grep 'not found' "$tmp/qga.ldd" | tr -s ' \n\t' ' ')"
# "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" and the loader
# "/lib64/ld-linux-x86-64.so.2 (0x...)"; linux-vdso has no file.
awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' "$tmp/qga.ldd" | sort -u |
	while read -r lib; do
		mkdir -p "$ir$(dirname "$lib")"
		cp -L "$lib" "$ir$lib"
	done
[[ -e $ir/lib64/ld-linux-x86-64.so.2 ]] || die "qemu-ga's loader was not found by ldd"
log "qemu-ga: $(basename "$qga_deb"), libraries: $(awk '$2 == "=>" { printf "%s ", $1 }' "$tmp/qga.ldd")"

# Sorted names, fixed owner and times, --reproducible: same inputs, same
# bytes, so a rebuild does not change the image digest.
find "$ir" -exec touch -h -d @0 {} +
(cd "$ir" && find . -print0 | LC_ALL=C sort -z |
	cpio --null --quiet -o -H newc -R 0:0 --reproducible) | gzip -n -1 >"$tmp/initrd.img"

# --- disk -----------------------------------------------------------------------
log "building disk.qcow2 ..."
mkdir -p "$tmp/disk"
echo "hello from the vmpod disk" >"$tmp/disk/hello.txt"
touch -d @0 "$tmp/disk/hello.txt" "$tmp/disk"
# Fixed UUID, hash seed and times for reproducibility. E2FSPROGS_FAKE_TIME
# covers what mke2fs stamps itself; -d copies the ctime of hello.txt, which
# only debugfs can reset.
uuid=6d9a2f5e-0c1b-4f3a-9e2d-7a6b5c4d3e2f
export E2FSPROGS_FAKE_TIME=1
mke2fs -q -F -t ext4 -L vmpod-disk -U "$uuid" -E "hash_seed=$uuid,root_owner=0:0" \
	-d "$tmp/disk" "$tmp/disk.raw" 16M >/dev/null
debugfs -w -R "set_inode_field /hello.txt ctime 1" "$tmp/disk.raw" 2>/dev/null
unset E2FSPROGS_FAKE_TIME
qemu-img convert -O qcow2 "$tmp/disk.raw" "$tmp/disk.qcow2"

# --- containerdisk -----------------------------------------------------------------
log "building containerdisk.oci.tar ($image) ..."
(cd "$repo" && go run ./hack/guest/containerdisk -o "$tmp/containerdisk.oci.tar" -name "$image" \
	-file /boot/vmlinuz="$tmp/vmlinuz" \
	-file /boot/vmlinux="$tmp/vmlinux" \
	-file /boot/initrd.img="$tmp/initrd.img" \
	-file /disk/disk.qcow2="$tmp/disk.qcow2")

printf 'KERNEL_VERSION=%s\nIMAGE=%s\n' "$kver" "$image" >"$tmp/guest.env"
for f in "${outputs[@]}"; do mv -f "$tmp/$f" "$out/$f"; done
log "done: $out"
echo "$out"
