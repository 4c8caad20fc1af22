#!/usr/bin/env bash
# Builds kind's node image for vmpod offline, from Debian packages and Go
# modules only (nothing is pulled from a registry; `kind build node-image`
# would fetch etcd, CoreDNS, pause, kindnetd and local-path images):
#
#   localhost/vmpod/kind-base:bookworm  Debian 12 by debootstrap, with the
#       steps and files of kind's images/base (taken from the kind module
#       in go.mod): systemd, kind's entrypoint, its containerd, kubelet and
#       sysctl config; runc and the CNI plugins are Debian's.
#   localhost/vmpod/kind-node:v1.37.2   the base plus kubelet, kubeadm,
#       kubectl, containerd 2.4.2, ctr, containerd-shim-runc-v2, crictl,
#       /kind/version, /kind/manifests/default-cni.yaml (nodenet, below)
#       and default-storage.yaml, and, already in its containerd (k8s.io
#       namespace, pinned), the images kubeadm v1.37.2 runs: kube-apiserver,
#       kube-controller-manager, kube-scheduler, kube-proxy, etcd, CoreDNS
#       and pause, each made here from the binary built here
#       (hack/ociimage; CoreDNS from hack/coredns/kind), so kubeadm never
#       pulls. The CNI is nodenet
#       (hack/kind/nodenet): Debian's ptp/host-local/portmap plugins on each
#       node's podCIDR plus routes between nodes, in place of kindnetd.
#
# Usage: hack/kind/images.sh [--with-qemu]   (prints the node image's name on stdout)
#   --with-qemu  also localhost/vmpod/kind-node:v1.37.2-qemu, the node image
#                with QEMU and libvirt's QEMU driver (hack/kind/node/install-qemu.sh,
#                apt at build time), and print that name instead
# Environment:
#   K8S_BIN  where kubelet, kubectl, kube-apiserver, kube-controller-manager,
#            kube-proxy, etcd, containerd, ctr, containerd-shim-runc-v2 and
#            crictl already are (default <repo>/_output/bin, where
#            hack/local-up.sh and hack/containerd/install.sh put them); a
#            missing one is built into _output/kind/k8s. kubeadm and
#            kube-scheduler are always built there.
# Everything it makes is under _output/kind. Each step is skipped when the
# digest of its inputs (recorded in _output/kind/stamps and on the image as
# a label) did not change and its output is still there. Needs root
# (debootstrap, chroot), docker, go, jq.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
here=$repo/hack/kind
cd "$repo"

K8S_VERSION=v1.37.2
BASE_IMAGE=localhost/vmpod/kind-base:bookworm
NODE_IMAGE=localhost/vmpod/kind-node:$K8S_VERSION
QEMU_NODE_IMAGE=$NODE_IMAGE-qemu
NODENET_IMAGE=localhost/vmpod/kind-nodenet:v1
SUITE=bookworm
# kind's images/base installs these (minus nfs-common and open-iscsi, for
# network storage tests only), plus runc and the CNI plugins, which kind
# builds from source.
PACKAGES=systemd,conntrack,iptables,nftables,iproute2,ethtool,util-linux,mount,kmod,libseccomp2,pigz,fuse-overlayfs,e2fsprogs,bash,ca-certificates,curl,jq,procps,runc,containernetworking-plugins
# Bump these when the steps below change what they make (the digests of
# the steps' inputs cover files, not this script).
BASE_RECIPE=base-1
IMAGES_RECIPE=images-1
K8S_LDFLAGS="-X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37"

with_qemu=0
case ${1:-} in
"") ;;
--with-qemu) with_qemu=1 ;;
*)
	echo "usage: $0 [--with-qemu]" >&2
	exit 2
	;;
esac

out=$repo/_output/kind
K8S_BIN=${K8S_BIN:-$repo/_output/bin}
mkdir -p "$out/k8s" "$out/images" "$out/stamps"
exec 9>"$out/.lock"
flock 9

log() { echo "kind/images: $*" >&2; }
die() { log "$*"; exit 1; }
# timed LABEL CMD...: runs CMD and logs how long it took.
timed() {
	local label=$1 start=$SECONDS
	shift
	"$@"
	log "$label: $((SECONDS - start)) s"
}
# logged FILE CMD...: runs CMD with its output in FILE.
logged() {
	local f=$1
	shift
	"$@" >"$f" 2>&1
}
# digest FILE|DIR|-s STRING...: one digest of the contents of everything named.
digest() {
	{
		while (($#)); do
			if [[ $1 == -s ]]; then
				echo "$2"
				shift 2
				continue
			fi
			if [[ -d $1 ]]; then
				find "$1" -type f -print0 | sort -z | xargs -0 sha256sum
			else
				sha256sum "$1"
			fi
			shift
		done
	} | sha256sum | cut -c1-16
}
# fresh NAME DIGEST: step NAME was last done with DIGEST.
fresh() { [[ -f $out/stamps/$1 && $(cat "$out/stamps/$1") == "$2" ]]; }
done_step() { echo "$2" >"$out/stamps/$1"; }
image_label() { docker image inspect -f "{{index .Config.Labels \"$2\"}}" "$1" 2>/dev/null || true; }

kind_dir=$(go list -m -f '{{.Dir}}' sigs.k8s.io/kind)
kind_base=$kind_dir/images/base
[[ -d $kind_base/files ]] || die "no images/base in the kind module ($kind_dir)"

# --- 1. the base image --------------------------------------------------
base_digest=$(digest -s "$SUITE $PACKAGES $BASE_RECIPE" "$kind_base/files")
if [[ $(image_label "$BASE_IMAGE" io.vmpod.inputs) != "$base_digest" ]]; then
	rootfs=$out/base/rootfs
	# The mirror apt uses on this machine; debootstrap's default otherwise.
	mirror=$(awk '/^URIs:/ { print $2; exit }' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
	if [[ ! -f $out/stamps/debootstrap || $(cat "$out/stamps/debootstrap") != "$SUITE $PACKAGES" ]]; then
		command -v debootstrap >/dev/null || die "debootstrap is not installed (apt-get install debootstrap)"
		rm -rf "$out/base"
		mkdir -p "$out/base"
		log "debootstrap $SUITE into $rootfs (minutes)"
		timed debootstrap logged "$out/base/debootstrap.log" \
			debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$rootfs.tmp" ${mirror:+"$mirror"} ||
			die "debootstrap failed: $out/base/debootstrap.log"
		mv "$rootfs.tmp" "$rootfs.debootstrap"
		echo "$SUITE $PACKAGES" >"$out/stamps/debootstrap"
	fi
	log "kind's images/base steps"
	rm -rf "$rootfs"
	cp -a "$rootfs.debootstrap" "$rootfs"
	f=$kind_base/files
	install -m 0755 "$f"/usr/local/bin/* "$rootfs/usr/local/bin/"
	mkdir -p "$rootfs/kind/bin" "$rootfs/LICENSES" "$rootfs/etc/containerd" "$rootfs/etc/default" \
		"$rootfs/etc/sysctl.d" "$rootfs/etc/systemd/system/kubelet.service.d" "$rootfs/etc/kubernetes/manifests"
	install -m 0644 "$f"/kind/README.txt "$rootfs/kind/"
	install -m 0755 "$f"/kind/bin/* "$rootfs/kind/bin/"
	install -m 0644 "$f"/LICENSES/* "$rootfs/LICENSES/"
	install -m 0644 "$f"/etc/crictl.yaml "$rootfs/etc/"
	install -m 0644 "$f"/etc/containerd/* "$rootfs/etc/containerd/"
	install -m 0644 "$f"/etc/default/* "$rootfs/etc/default/"
	install -m 0644 "$f"/etc/sysctl.d/* "$rootfs/etc/sysctl.d/"
	find "$f/etc/systemd/system" -maxdepth 1 -type f -exec install -m 0644 {} "$rootfs/etc/systemd/system/" \;
	install -m 0644 "$f"/etc/systemd/system/kubelet.service.d/* "$rootfs/etc/systemd/system/kubelet.service.d/"
	# What images/base's Dockerfile does after installing its packages.
	find "$rootfs/lib/systemd/system/sysinit.target.wants/" -name systemd-tmpfiles-setup.service -delete
	rm -f "$rootfs"/lib/systemd/system/multi-user.target.wants/* "$rootfs"/etc/systemd/system/*.wants/* \
		"$rootfs"/lib/systemd/system/local-fs.target.wants/* "$rootfs"/lib/systemd/system/sockets.target.wants/*udev* \
		"$rootfs"/lib/systemd/system/sockets.target.wants/*initctl* "$rootfs"/lib/systemd/system/basic.target.wants/*
	echo "ReadKMsg=no" >>"$rootfs/etc/systemd/journald.conf"
	ln -sf /usr/lib/systemd/systemd "$rootfs/sbin/init"
	chroot "$rootfs" systemctl enable kubelet.service containerd.service undo-mount-hacks.service >/dev/null 2>&1
	chroot "$rootfs" systemctl mask systemd-binfmt.service >/dev/null 2>&1
	# kind's containerd config looks for CNI plugins in /opt/cni/bin;
	# Debian puts them in /usr/lib/cni.
	mkdir -p "$rootfs/opt/cni"
	ln -sfn /usr/lib/cni "$rootfs/opt/cni/bin"
	# No apt lists or caches in the image (kind's clean-install does the same).
	rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb
	log "importing $BASE_IMAGE"
	timed "docker import" sh -c "tar -C '$rootfs' --numeric-owner -c . | docker import \
		--change 'ENV container=docker' --change 'LABEL io.vmpod.inputs=$base_digest' \
		--change 'ENTRYPOINT [\"/usr/local/bin/entrypoint\", \"/sbin/init\"]' - '$BASE_IMAGE' >/dev/null"
	rm -rf "$rootfs"
fi
log "$BASE_IMAGE up to date"

# --- 2. binaries --------------------------------------------------------
bin() { # bin NAME: the path of binary NAME, from K8S_BIN or _output/kind/k8s
	if [[ -x $K8S_BIN/$1 ]]; then echo "$K8S_BIN/$1"; else echo "$out/k8s/$1"; fi
}
need=()
for b in kubelet kubectl kube-apiserver kube-controller-manager kube-proxy etcd; do
	[[ -x $K8S_BIN/$b ]] || need+=("$b")
done
gobuild() { go build -ldflags "$K8S_LDFLAGS" -o "$out/k8s/" "$@"; }
pkgs=(k8s.io/kubernetes/cmd/kubeadm k8s.io/kubernetes/cmd/kube-scheduler)
for b in "${need[@]}"; do
	case $b in
	etcd) pkgs+=(go.etcd.io/etcd/server/v3) ;;
	*) pkgs+=("k8s.io/kubernetes/cmd/$b") ;;
	esac
done
log "go build ${pkgs[*]##*/} (cold: minutes each; the Go build cache makes it seconds)"
timed "go build" gobuild "${pkgs[@]}"
# go names go.etcd.io/etcd/server/v3's binary after the element before
# the major version.
for f in server v3; do [[ ! -f $out/k8s/$f ]] || mv "$out/k8s/$f" "$out/k8s/etcd"; done
for b in containerd ctr containerd-shim-runc-v2 crictl; do
	if [[ ! -x $(bin "$b") ]]; then
		log "containerd 2.4.2 and crictl (hack/containerd/install.sh)"
		hack/containerd/install.sh "$out/k8s"
		break
	fi
done
"$(bin kubeadm)" version -o short | grep -qx "$K8S_VERSION" || die "kubeadm is not $K8S_VERSION"

# --- 3. the images kubeadm runs -----------------------------------------
# kubeadm's own list, so the names and tags are exactly the ones it asks
# containerd for; kind swaps kubeadm's pause for containerd's sandbox image.
mapfile -t kubeadm_images < <("$(bin kubeadm)" config images list --kubernetes-version "$K8S_VERSION")
sandbox_image=$(sed -n 's/^ *sandbox_image *= *"\(.*\)"/\1/p' "$kind_base/files/etc/containerd/config.toml")
[[ -n $sandbox_image ]] || die "no sandbox_image in kind's containerd config"
image_for() { # image_for NAME: kubeadm's reference for component NAME
	local i
	for i in "${kubeadm_images[@]}"; do
		[[ ${i##*/} == "$1":* ]] && { echo "$i"; return; }
	done
	die "kubeadm lists no $1 image"
}
# closure SRC=DST...: -file flags for hack/ociimage: each file and the
# shared libraries it loads (the binaries are linked against this
# machine's glibc).
closure() {
	local pair src lib
	declare -A seen=()
	for pair in "$@"; do
		echo "-file=$pair"
		src=${pair%%=*}
		while read -r lib; do
			[[ -n ${seen[$lib]:-} ]] && continue
			seen[$lib]=1
			echo "-file=$(readlink -f "$lib")=$lib"
		done < <(ldd "$src" 2>/dev/null | grep -o '/[^ ]*' | sort -u)
	done
}
ociimage() { go run ./hack/ociimage "$@"; }

# Static binaries of this repository: CoreDNS with the plugins kubeadm's
# Corefile names (hack/coredns/kind), pause (hack/pause), nodenet.
(cd hack/coredns && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$out/images/coredns-kind" ./kind)
pause_tar=$(hack/pause/build.sh "$out/pause")
# Built as the Kubernetes binaries are (cgo, no -trimpath), so that
# client-go comes from the same Go build cache.
go build -o "$out/k8s/nodenet" ./hack/kind/nodenet

images_digest=$(digest -s "${kubeadm_images[*]} $sandbox_image" "$(bin kube-apiserver)" "$(bin kube-controller-manager)" \
	"$(bin kube-scheduler)" "$(bin kube-proxy)" "$(bin etcd)" "$out/images/coredns-kind" "$out/pause/pause" "$out/k8s/nodenet" \
	hack/ociimage -s "$IMAGES_RECIPE")
if ! fresh images "$images_digest"; then
	log "making the control plane's images from the binaries"
	rm -f "$out"/images/k8s-*.oci.tar
	for c in kube-apiserver kube-controller-manager kube-scheduler etcd; do
		mapfile -t files < <(closure "$(bin "$c")=/usr/local/bin/$c")
		ociimage -name "$(image_for "$c")" -o "$out/images/k8s-$c.oci.tar" "${files[@]}" \
			-env PATH=/usr/local/bin:/usr/bin:/bin -entrypoint "/usr/local/bin/$c"
	done
	# kube-proxy runs iptables (and nft for its nftables mode): this
	# machine's, with their libraries and extensions.
	proxy_files=("$(bin kube-proxy)=/usr/local/bin/kube-proxy" /usr/sbin/xtables-nft-multi=/usr/sbin/xtables-nft-multi)
	command -v nft >/dev/null && proxy_files+=("$(command -v nft)=/usr/sbin/nft")
	for x in /usr/lib/x86_64-linux-gnu/xtables/*.so; do proxy_files+=("$x=$x"); done
	links=()
	for l in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore; do
		links+=(-link "usr/sbin/$l=xtables-nft-multi")
	done
	mapfile -t files < <(closure "${proxy_files[@]}")
	ociimage -name "$(image_for kube-proxy)" -o "$out/images/k8s-kube-proxy.oci.tar" "${files[@]}" "${links[@]}" \
		-env PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin -entrypoint /usr/local/bin/kube-proxy
	ociimage -name "$(image_for coredns)" -o "$out/images/k8s-coredns.oci.tar" -file "$out/images/coredns-kind=/coredns" \
		-entrypoint /coredns -user 65532:65532
	ociimage -name "$sandbox_image" -o "$out/images/k8s-pause.oci.tar" -file "$out/pause/pause=/pause" \
		-entrypoint /pause -user 65535:65535
	mapfile -t files < <(closure "$out/k8s/nodenet=/nodenet")
	ociimage -name "$NODENET_IMAGE" -o "$out/images/k8s-nodenet.oci.tar" "${files[@]}" -entrypoint /nodenet
	done_step images "$images_digest"
fi

# --- 4. the node's containerd store, filled at build time ---------------
# A containerd of the same release as the node's, on this machine, with a
# root in the build context: images imported without unpacking (as kind's
# node image build does) are content and metadata only; the node's CRI
# unpacks them into its own snapshotter when a pod needs one.
ctx=$out/node
store_digest=$(digest -s "$images_digest" "$(bin containerd)")
if ! fresh store "$store_digest"; then
	log "importing the images into the node's containerd store"
	rm -rf "$ctx/var/lib/containerd"
	mkdir -p "$ctx/var/lib/containerd"
	state=$(mktemp -d /tmp/vmpod-kind-containerd.XXXXXX)
	cat >"$state/config.toml" <<EOF
version = 3
root = "$ctx/var/lib/containerd"
state = "$state/state"
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.cri.v1.images", "io.containerd.cri.v1.runtime", "io.containerd.nri.v1.nri"]
[grpc]
  address = "$state/containerd.sock"
[ttrpc]
  address = "$state/containerd.sock.ttrpc"
EOF
	"$(bin containerd)" --config "$state/config.toml" >"$state/log" 2>&1 &
	cpid=$!
	trap 'kill $cpid 2>/dev/null; wait $cpid 2>/dev/null; rm -rf "$state"' EXIT
	for ((i = 0; i < 100; i++)); do
		[[ -S $state/containerd.sock ]] && break
		sleep 0.1
	done
	ctr() { "$(bin ctr)" --address "$state/containerd.sock" --namespace k8s.io "$@"; }
	ctr version >/dev/null 2>&1 || die "containerd did not start: $(cat "$state/log")"
	for tar in "$out"/images/k8s-*.oci.tar; do
		if ! ctr images import --label=io.cri-containerd.pinned=pinned --all-platforms --no-unpack - <"$tar" >/dev/null 2>"$state/err"; then
			die "importing $tar: $(grep -v DEPRECATION "$state/err")"
		fi
	done
	# kubeadm's pause name too, so its preflight check sees it.
	ctr images tag --force "$sandbox_image" "$(image_for pause)" >/dev/null 2>&1
	ctr images label "$(image_for pause)" io.cri-containerd.pinned=pinned >/dev/null 2>&1
	ctr images list -q 2>/dev/null | grep -v '^sha256:' >"$ctx/images.txt"
	kill "$cpid"
	wait "$cpid" 2>/dev/null || true
	trap - EXIT
	rm -rf "$state"
	log "in the node's containerd: $(tr '\n' ' ' <"$ctx/images.txt")"
	done_step store "$store_digest"
fi

# --- 5. the node image --------------------------------------------------
mkdir -p "$ctx/usr/bin" "$ctx/usr/local/bin" "$ctx/kind/manifests" "$ctx/etc/containerd"
for b in kubelet kubeadm kubectl; do cp -p "$(bin "$b")" "$ctx/usr/bin/$b"; done
for b in containerd ctr containerd-shim-runc-v2 crictl; do cp -p "$(bin "$b")" "$ctx/usr/local/bin/$b"; done
install -m 0755 "$here/node/vmpod-entrypoint" "$ctx/usr/local/bin/vmpod-entrypoint"
echo "$K8S_VERSION" >"$ctx/kind/version"
sed "s|@NODENET_IMAGE@|$NODENET_IMAGE|" "$here/node/default-cni.yaml" >"$ctx/kind/manifests/default-cni.yaml"
cp "$here/node/default-storage.yaml" "$ctx/kind/manifests/default-storage.yaml"
# What images/base makes with `ctr oci spec`: runc's base spec for pods,
# with kind's product-files hook.
"$(bin ctr)" oci spec |
	jq '.hooks.createContainer[.hooks.createContainer | length] |= . + {"path": "/kind/bin/mount-product-files.sh"}' |
	jq 'del(.process.rlimits)' >"$ctx/etc/containerd/cri-base.json"
cat >"$ctx/Dockerfile" <<EOF
FROM $BASE_IMAGE
COPY . /
ENV container=docker
STOPSIGNAL SIGRTMIN+3
ENTRYPOINT ["/usr/local/bin/vmpod-entrypoint", "/usr/local/bin/entrypoint", "/sbin/init"]
EOF
printf '%s\n' Dockerfile images.txt .dockerignore >"$ctx/.dockerignore"
node_digest=$(digest -s "$base_digest" "$ctx")
if [[ $(image_label "$NODE_IMAGE" io.vmpod.inputs) != "$node_digest" ]]; then
	log "building $NODE_IMAGE"
	timed "docker build" docker build -q --label "io.vmpod.inputs=$node_digest" -t "$NODE_IMAGE" "$ctx" >/dev/null
fi
log "$NODE_IMAGE up to date"
if ((!with_qemu)); then
	echo "$NODE_IMAGE"
	exit 0
fi

# --- 6. with QEMU (--with-qemu) -------------------------------------------
# The node image plus what vmpod needs on a node (node/install-qemu.sh, the
# same script node-setup.sh runs in a running node), from Debian's packages
# at build time, so that clusters made from it need no apt.
qctx=$out/node-qemu
rm -rf "$qctx"
mkdir -p "$qctx"
cp "$here/node/install-qemu.sh" "$qctx/"
printf '%s\n' "FROM $NODE_IMAGE" "COPY install-qemu.sh /kind/install-qemu.sh" "RUN sh /kind/install-qemu.sh" >"$qctx/Dockerfile"
qemu_digest=$(digest -s "$node_digest" "$qctx")
if [[ $(image_label "$QEMU_NODE_IMAGE" io.vmpod.inputs) != "$qemu_digest" ]]; then
	log "building $QEMU_NODE_IMAGE (apt in the image: QEMU, libvirt's QEMU driver)"
	timed "docker build (QEMU)" docker build -q --label "io.vmpod.inputs=$qemu_digest" -t "$QEMU_NODE_IMAGE" "$qctx" >/dev/null
fi
log "$QEMU_NODE_IMAGE up to date"
echo "$QEMU_NODE_IMAGE"
