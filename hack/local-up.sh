#!/usr/bin/env bash
# A Kubernetes cluster running a vmpod VM pod, on this machine, in
# one command (make demo). As root, on Debian 12:
#
#   hack/local-up.sh       build what is missing, start the cluster, run
#                          examples/test-guest.yaml and show it working
#   hack/local-down.sh     remove every process, namespace, mount, cgroup
#                          and file this made
#
# The whole node lives in a network namespace ($NAME) that has no route
# out: etcd and kube-apiserver on its loopback, the node address on a veth
# pair whose both ends are inside, the CNI bridge and pod IPs behind it.
# Processes: etcd, kube-apiserver, kube-controller-manager (every default
# controller: Deployments, ReplicaSets, StatefulSets, Jobs, EndpointSlices,
# garbage collection, namespaces, ServiceAccounts, eviction of pods from
# unreachable nodes), the scheduler (cmd/scheduler-plugin, kube-scheduler
# with VMPlacement), containerd 2.4.2 with the vmpod runtime handler, the
# kubelet, kube-proxy (iptables mode, its rules in the node's namespace) and
# the labeller (vm-runtime labeller); the labeller and the scheduler run as
# the ServiceAccounts of manifests/. Cluster DNS is CoreDNS, built here
# (hack/coredns) and run as an ordinary pod on the first node, the Service
# kube-dns at $DNS_IP, the kubelets' clusterDNS. A forwarder makes the
# apiserver reachable on the host's 127.0.0.1:$HOST_PORT so that kubectl and
# the e2e tests run from the host.
#
# A second node, $NAME-vm, runs VMs only: its kubelet's
# containerRuntimeEndpoint is `vm-runtime cri` (no containerd there). It has
# a network namespace of its own, joined to the first node's by a veth pair
# (10.86.1.1 there, its node IP 10.86.1.2 here), a mount namespace, state
# and CNI config of its own, and a kubelet cgroupRoot below the first
# node's. It is registered with the taint vmpod.io/vm-only=true:NoSchedule:
# ordinary pods, and VM pods that do not tolerate it, stay on the first
# node (so the demo and the e2e tests written for it run there, as before),
# and a VM pod placed on it says so (test/e2e's TestCRINode). Its images
# come from a registry on its own loopback port 80 (hack/local/registry)
# serving the test guest as localhost/vmpod/test-guest:v1, the name the
# first node imported into containerd. It runs kube-proxy too. The two
# namespaces route each other's pod CIDR over their veth pair, so pods,
# Services and DNS work across the nodes and never leave the namespaces.
#
# Binaries are built from the pinned modules into _output/bin (the first
# build took 30 minutes on 2 busy cores; later runs take about a minute).
# State survives a reboot and a wiped /tmp: the record of what was made and
# the cluster's data in /var/lib/vmpod-local (logs: /var/lib/vmpod-local/logs),
# sockets and the VMs' state in /run/vmpod-local. Whatever an earlier run
# left, recorded or not, is removed first (hack/local-down.sh).
# Each node's vm-runtime state root is a file system of its own, as a
# node's disk: a sparse ext4 image in $STATE/disks, loop-mounted in the
# node's mount namespace (a tmpfs where the host has no loop device), of
# VMPOD_LOCAL_STATE_FS_SIZE (default 4G); test/e2e fills it (TestDiskFull).
# Environment: VMPOD_LOCAL_PORT (default 16443), VMPOD_LOCAL_NO_DEMO=1 to
# skip the example pod, VMPOD_LOCAL_CRI_NODE=0 for no VM-only node,
# VMPOD_LOCAL_NAME (default vmpod-local) for a cluster beside another
# (with its own VMPOD_LOCAL_PORT and VMPOD_LOCAL_OUT).
set -euo pipefail
# shellcheck source=hack/local/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/local/lib.sh"
cd "$repo"

[[ $(id -u) -eq 0 ]] || die "run as root (network namespaces, cgroups, the kubelet)"
# An earlier cluster, or what a failed or interrupted one left (with or
# without its record): removed first, or nothing is started.
log "removing what an earlier local cluster left (hack/local-down.sh)"
"$repo/hack/local-down.sh" || die "an earlier local cluster's leftovers are still there (above); local-up starts nothing"

on_error() {
	local rc=$?
	log "local-up failed (exit $rc); component logs are in $STATE/logs:"
	local f
	for f in "$STATE"/logs/*.log; do
		[[ -s $f ]] || continue
		echo "--- $f (last lines)" >&2
		tail -n 8 "$f" >&2
	done
	log "hack/local-down.sh removes what was started"
	exit "$rc"
}
trap on_error ERR

# --- 1. What to build with, and what to build ------------------------------
log "checking Debian packages (hack/install-deps.sh)"
hack/install-deps.sh
command -v openssl >/dev/null || {
	log "installing openssl"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openssl >/dev/null
}
log "containerd 2.4.2, ctr, crictl (hack/containerd/install.sh)"
hack/containerd/install.sh "$BIN"

# go_build LABEL LDFLAGS OUTPUT PKG...: go build into _output/bin, showing
# progress (a cold build of the Kubernetes binaries compiles ~2,500
# packages). go build relinks nothing that is up to date, so a warm run
# takes seconds.
go_build() {
	local label=$1 ldflags=$2 output=$3 blog i
	shift 3
	log "building $label"
	blog=$(mktemp)
	# -v names each package as it is compiled (cached ones are not named).
	go build -v -ldflags "$ldflags" -o "$output" "$@" >"$blog" 2>&1 &
	local pid=$!
	for ((i = 1; ; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 1
		((i % 20 == 0)) && log "  ... $(wc -l <"$blog") packages compiled"
	done
	if ! wait "$pid"; then
		tail -n 30 "$blog" >&2
		rm -f "$blog"
		die "go build failed: $label"
	fi
	(($(wc -l <"$blog") > 0)) && log "  $(wc -l <"$blog") packages compiled"
	rm -f "$blog"
}
k8s_ldflags="-X k8s.io/component-base/version.gitVersion=v1.37.2 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37"
go_build "kube-apiserver, kube-controller-manager, kubelet, kube-proxy, kubectl (cold: 15-30 min on 2 cores)" "$k8s_ldflags" "$BIN/" \
	k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
	k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy k8s.io/kubernetes/cmd/kubectl
go_build etcd "" "$BIN/etcd" go.etcd.io/etcd/server/v3
go_build "scheduler-plugin and vm-runtime" "$k8s_ldflags" "$BIN/" ./cmd/scheduler-plugin ./cmd/vm-runtime
# The shim links no libvirt (the node daemon, vm-runtime, runs the VMs): no cgo.
(export CGO_ENABLED=0 && go_build "the shim" "" "$BIN/containerd-shim-vmpod-v2" ./cmd/containerd-shim-vmpod-v2) || exit 1
# QEMU's jailer, which vm-runtime finds next to itself: no cgo either.
(export CGO_ENABLED=0 && go_build "the jailer" "" "$BIN/vmpod-qemu" ./cmd/vmpod-qemu) || exit 1
go_build "the apiserver forwarder" "" "$BIN/vmpod-local-forward" ./hack/local/forward
if ((CRI_NODE)); then go_build "the VM-only node's registry" "" "$BIN/vmpod-local-registry" ./hack/local/registry; fi
log "pause image (hack/pause/build.sh)"
pause_archive=$(hack/pause/build.sh)
log "CoreDNS and busybox images (hack/local/images.sh)"
mapfile -t images < <(hack/local/images.sh)
((${#images[@]} == 2)) || die "hack/local/images.sh did not build its images"
log "test guest and its containerdisk (hack/guest/build.sh)"
guest_dir=$(hack/guest/build.sh)
# shellcheck disable=SC1091
source "$guest_dir/guest.env" # IMAGE=localhost/vmpod/test-guest:v1

# --- 2. The node: namespace, cgroups, a private mount namespace -----------
log "node namespace $NAME: lo, $NODE_IP on a veth pair inside it, no route out"
mkdir -p "$STATE"/{logs,pki,bin,cni/net.d,cni/ipam,cni/cache,kubelet,pod-logs,container-logs,kubelet-plugins} "$RUN"/{tmp,vm}
boot_id >"$STATE/boot_id"
: >"$STATE/pids"
: >"$STATE/made"
record netns "$NAME"
ip netns add "$NAME"
ip -n "$NAME" link set lo up
ip -n "$NAME" link add node0 type veth peer name node1
ip -n "$NAME" addr add "$NODE_IP/24" dev node0
ip -n "$NAME" addr add "$PEER_IP/24" dev node1
ip -n "$NAME" link set node0 up
ip -n "$NAME" link set node1 up

# The kubelet's cgroupRoot must exist in every hierarchy (v1 controllers,
# name=systemd, and the v2 one); cpuset needs its parent's CPUs and nodes.
# The VM-only node's is below the first's: removed with it.
while read -r mp; do
	record cgroup "$mp/$NAME"
	mkdir "$mp/$NAME"
	if ((CRI_NODE)); then mkdir "$mp$VM_CGROUP_ROOT"; fi
	for f in cpuset.cpus cpuset.mems; do
		[[ -f $mp/$f ]] || continue
		cat "$mp/$f" >"$mp/$NAME/$f"
		if ((CRI_NODE)); then cat "$mp/$f" >"$mp$VM_CGROUP_ROOT/$f"; fi
	done
done < <(cgroup_mounts)

# The kubelet sets these global sysctls: remember them for local-down.
for k in vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys kernel.keys.root_maxbytes; do
	record sysctl "$k" "$(sysctl -n "$k")"
done

# One process keeps the node's private mount namespace (nsenter ... unshare
# execs sleep: the PID stays). Enter it with nsenter -t, never
# `ip netns exec`, which remounts /sys and empties /sys/fs/cgroup.
nsenter --net="$NETNS" -- unshare --mount --propagation private -- sleep infinity >/dev/null 2>&1 &
record_pid holder $!
wait_for "mount namespace" 10 bash -c "[[ \$(readlink /proc/$(holder_pid)/exe) == */sleep ]]" ||
	die "the namespace holder did not start"

# Directories the kubelet and CNI write whatever their configuration says:
# in the node's mount namespace they are the root's own.
for pair in kubelet:/var/lib/kubelet container-logs:/var/log/containers cni/cache:/var/lib/cni; do
	src=$STATE/${pair%%:*} dst=${pair#*:}
	if [[ ! -d $dst ]]; then
		record mountpoint "$dst"
		mkdir -p "$dst"
	fi
	in_node mount --bind "$src" "$dst"
done

# state_fs RUN DIR IMAGE: DIR, a vm-runtime state root, becomes a file
# system of its own in a node's mount namespace (RUN: in_node or
# in_vm_node), as a node's disk: an ext4 image of $STATE_FS_SIZE (sparse,
# made once, loop-mounted; the loop device goes with the namespace's last
# process), or a tmpfs of that size where the host has no loop device.
# test/e2e fills it to see a full disk (TestDiskFull) without touching the
# host's.
state_fs() {
	local run=$1 dir=$2 img=$3
	mkdir -p "$dir" "${img%/*}"
	if [[ ! -f $img ]]; then
		truncate -s "$STATE_FS_SIZE" "$img"
		mkfs.ext4 -q -F -m 0 -E root_owner=0:0 "$img" || die "mkfs.ext4 $img"
	fi
	if $run mount -o loop "$img" "$dir" 2>/dev/null; then
		log "state root $dir: $STATE_FS_SIZE ext4 ($img, loop-mounted in the node)"
	else
		$run mount -t tmpfs -o "size=$STATE_FS_SIZE,mode=0755" tmpfs "$dir" || die "no file system for $dir"
		log "state root $dir: $STATE_FS_SIZE tmpfs (no loop device here)"
	fi
}
state_fs in_node "$STATE/vm" "$STATE/disks/node.img"

if ((CRI_NODE)); then
	log "VM-only node namespace $VM_NAME: lo, $VM_NODE_IP on a veth pair to $NAME ($VM_LINK_IP), no route out"
	mkdir -p "$VM_STATE"/{kubelet,container-logs,cni/net.d,cni/ipam,pod-logs,kubelet-plugins} "$VM_RUN"
	record netns "$VM_NAME"
	ip netns add "$VM_NAME"
	ip -n "$VM_NAME" link set lo up
	ip -n "$NAME" link add vmnode0 type veth peer name vmnode1 netns "$VM_NAME"
	ip -n "$NAME" addr add "$VM_LINK_IP/24" dev vmnode0
	ip -n "$VM_NAME" addr add "$VM_NODE_IP/24" dev vmnode1
	ip -n "$NAME" link set vmnode0 up
	ip -n "$VM_NAME" link set vmnode1 up
	# Each node reaches the other's pods (and the VM-only node the first's
	# node IP, the apiserver's advertised address) over the pair: pods,
	# Services and DNS work across nodes, and nothing leaves the namespaces.
	ip -n "$NAME" route add "$VM_POD_CIDR" via "$VM_NODE_IP"
	ip -n "$VM_NAME" route add "$POD_CIDR" via "$VM_LINK_IP"
	ip -n "$VM_NAME" route add "$NODE_IP/32" via "$VM_LINK_IP"
	nsenter --net="$VM_NETNS" -- unshare --mount --propagation private -- sleep infinity >/dev/null 2>&1 &
	record_pid holder-vm $!
	wait_for "mount namespace" 10 bash -c "[[ \$(readlink /proc/$(holder_pid holder-vm)/exe) == */sleep ]]" ||
		die "the VM-only node's namespace holder did not start"
	# The kubelet's own dirs (the CRI server keeps the CNI cache in its
	# state root).
	for pair in kubelet:/var/lib/kubelet container-logs:/var/log/containers; do
		src=$VM_STATE/${pair%%:*} dst=${pair#*:}
		if [[ ! -d $dst ]]; then
			record mountpoint "$dst"
			mkdir -p "$dst"
		fi
		in_vm_node mount --bind "$src" "$dst"
	done
	state_fs in_vm_node "$VM_STATE/cri" "$STATE/disks/vmnode.img"
fi

snapshotter=overlayfs
ovl=$STATE/ovl-probe
mkdir -p "$ovl"/{l,u,w,m}
if ! in_node mount -t overlay overlay -o "lowerdir=$ovl/l,upperdir=$ovl/u,workdir=$ovl/w" "$ovl/m" 2>/dev/null; then
	snapshotter=native
fi
in_node umount "$ovl/m" 2>/dev/null || true
rm -rf "$ovl"

# --- 3. Certificates and kubeconfigs --------------------------------------
log "certificates (one CA: apiserver, kubelet, admin and node clients)"
pki=$STATE/pki
openssl_quiet() { openssl "$@" 2>/dev/null; }
openssl_quiet req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=vmpod-local-ca" -keyout "$pki/ca.key" -out "$pki/ca.crt"
# cert NAME SUBJECT [SAN]: a key and a certificate signed by the CA.
cert() {
	openssl_quiet req -newkey rsa:2048 -nodes -subj "$2" -keyout "$pki/$1.key" -out "$pki/$1.csr"
	printf 'subjectAltName=%s\n' "${3:-DNS:$1}" >"$pki/$1.ext"
	openssl_quiet x509 -req -in "$pki/$1.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial -days 30 \
		-extfile "$pki/$1.ext" -out "$pki/$1.crt"
}
cert apiserver "/CN=kube-apiserver" "IP:127.0.0.1,IP:$NODE_IP,IP:$VM_LINK_IP,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc"
cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
cert kubelet "/CN=system:node:$NAME" "IP:$NODE_IP,DNS:$NAME"
cert admin "/O=system:masters/CN=vmpod-local-admin"
# The built-in RBAC names these two users (system:kube-controller-manager,
# system:node-proxier's binding).
cert controller-manager "/CN=system:kube-controller-manager"
cert kube-proxy "/CN=system:kube-proxy"
# One key pair for both nodes' checkpoints (docs/day2.md): each signs what
# it writes, and each restores what either signed.
openssl_quiet genpkey -algorithm ed25519 -out "$pki/state.key"
openssl_quiet pkey -in "$pki/state.key" -pubout -out "$pki/state.pub"
STATE_KEYS=(--state-signing-key "$pki/state.key" --state-trust-keys "$pki/state.pub")
cert node "/O=system:nodes/CN=system:node:$NAME"
if ((CRI_NODE)); then
	cert kubelet-vm "/CN=system:node:$VM_NAME" "IP:$VM_NODE_IP,DNS:$VM_NAME"
	cert node-vm "/O=system:nodes/CN=system:node:$VM_NAME"
fi
openssl_quiet genrsa -out "$pki/sa.key" 2048
openssl_quiet rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub"

# kubeconfig FILE SERVER USER-ARGS...
kubeconfig() {
	local f=$1 server=$2
	shift 2
	"$BIN/kubectl" config --kubeconfig "$f" set-cluster local --server "$server" --certificate-authority "$pki/ca.crt" --embed-certs >/dev/null
	"$BIN/kubectl" config --kubeconfig "$f" set-credentials user "$@" >/dev/null
	"$BIN/kubectl" config --kubeconfig "$f" set-context local --cluster local --user user >/dev/null
	"$BIN/kubectl" config --kubeconfig "$f" use-context local >/dev/null
}
kubeconfig "$STATE/admin.kubeconfig" https://127.0.0.1:6443 --client-certificate "$pki/admin.crt" --client-key "$pki/admin.key" --embed-certs
kubeconfig "$STATE/kubelet.kubeconfig" https://127.0.0.1:6443 --client-certificate "$pki/node.crt" --client-key "$pki/node.key" --embed-certs
kubeconfig "$STATE/controller-manager.kubeconfig" https://127.0.0.1:6443 --client-certificate "$pki/controller-manager.crt" --client-key "$pki/controller-manager.key" --embed-certs
kubeconfig "$STATE/kube-proxy.kubeconfig" https://127.0.0.1:6443 --client-certificate "$pki/kube-proxy.crt" --client-key "$pki/kube-proxy.key" --embed-certs
# The VM-only node reaches the apiserver over its veth pair.
if ((CRI_NODE)); then
	kubeconfig "$STATE/kubelet-vm.kubeconfig" "https://$VM_LINK_IP:6443" --client-certificate "$pki/node-vm.crt" --client-key "$pki/node-vm.key" --embed-certs
	kubeconfig "$STATE/kube-proxy-vm.kubeconfig" "https://$VM_LINK_IP:6443" --client-certificate "$pki/kube-proxy.crt" --client-key "$pki/kube-proxy.key" --embed-certs
fi
mkdir -p "$OUT"
kubeconfig "$OUT/kubeconfig" "https://127.0.0.1:$HOST_PORT" --client-certificate "$pki/admin.crt" --client-key "$pki/admin.key" --embed-certs

# --- 4. Control plane -----------------------------------------------------
log "starting etcd"
start etcd "$BIN/etcd" --name "$NAME" --data-dir "$STATE/etcd" --unsafe-no-fsync \
	--listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
	--listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
	--initial-cluster "$NAME=http://127.0.0.1:2380" --listen-metrics-urls ""
wait_for etcd 60 in_node bash -c 'exec 3<>/dev/tcp/127.0.0.1/2379' || die "etcd did not listen within 60s"

log "starting kube-apiserver"
# The default admission plugins (ServiceAccount, TaintNodesByCondition...)
# and endpoint reconciler: kube-controller-manager runs the controllers they
# rely on. logs/exec reach the kubelet at the node's InternalIP.
start kube-apiserver "$BIN/kube-apiserver" \
	--etcd-servers http://127.0.0.1:2379 --bind-address 0.0.0.0 --secure-port 6443 --advertise-address "$NODE_IP" \
	--tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" --client-ca-file "$pki/ca.crt" \
	--kubelet-client-certificate "$pki/apiserver-kubelet-client.crt" --kubelet-client-key "$pki/apiserver-kubelet-client.key" \
	--kubelet-certificate-authority "$pki/ca.crt" --kubelet-preferred-address-types InternalIP \
	--service-account-issuer https://kubernetes.default.svc --service-account-key-file "$pki/sa.pub" \
	--service-account-signing-key-file "$pki/sa.key" --service-cluster-ip-range "$SERVICE_CIDR" \
	--authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
	--allow-privileged
wait_for kube-apiserver 120 kubectl_node get --raw /readyz || die "kube-apiserver not ready within 120s"

log "starting kube-controller-manager"
start kube-controller-manager "$BIN/kube-controller-manager" --kubeconfig "$STATE/controller-manager.kubeconfig" \
	--authentication-kubeconfig "$STATE/controller-manager.kubeconfig" --authorization-kubeconfig "$STATE/controller-manager.kubeconfig" \
	--bind-address 127.0.0.1 --leader-elect=false --use-service-account-credentials \
	--service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/ca.crt" \
	--cluster-signing-cert-file "$pki/ca.crt" --cluster-signing-key-file "$pki/ca.key" \
	--service-cluster-ip-range "$SERVICE_CIDR" --cluster-cidr "$CLUSTER_CIDR"

log "apiserver on the host's 127.0.0.1:$HOST_PORT (forwarded into the node's loopback)"
"$BIN/vmpod-local-forward" -listen "127.0.0.1:$HOST_PORT" -netns "$NETNS" -target 127.0.0.1:6443 >"$STATE/logs/forward.log" 2>&1 &
record_pid forward $!
wait_for forwarder 20 "$BIN/kubectl" --kubeconfig "$OUT/kubeconfig" get --raw /readyz || die "the forwarder does not answer"

log "applying manifests/ (hack/local/manifests: without the DaemonSets and the Deployment)"
kubectl_node apply -k "$repo/hack/local/manifests" >"$STATE/logs/apply.log"
# sa_kubeconfig NAME FILE [FLAGS]: a kubeconfig with a token of ServiceAccount
# vmpod-system/NAME, so the component has exactly the RBAC users give it.
# $SERVER overrides the apiserver's address.
sa_kubeconfig() {
	local token
	token=$(kubectl_node -n vmpod-system create token "$1" --duration 720h "${@:3}")
	kubeconfig "$STATE/$2.kubeconfig" "${SERVER:-https://127.0.0.1:6443}" --token "$token"
}
sa_kubeconfig vmpod-scheduler scheduler

log "starting the scheduler (VMPlacement; ServiceAccount vmpod-scheduler)"
sed "s|@STATE@|$STATE|g" hack/local/scheduler-config.yaml >"$STATE/scheduler-config.yaml"
start scheduler "$BIN/scheduler-plugin" --config "$STATE/scheduler-config.yaml" --bind-address 127.0.0.1

# --- 5. The node: containerd, kubelet, labeller ---------------------------
log "starting containerd 2.4.2 (runtime handler vmpod, snapshotter $snapshotter)"
cp "$BIN/vm-runtime" "$STATE/bin/vm-runtime"
cp "$BIN/vmpod-qemu" "$STATE/bin/vmpod-qemu"
cp --remove-destination "$BIN/containerd-shim-vmpod-v2" "$STATE/bin/containerd-shim-vmpod-v2"
sed -e "s|@STATE@|$STATE|g" -e "s|@RUN@|$RUN|g" -e "s|@PAUSE_IMAGE@|$PAUSE_IMAGE|g" -e "s|@SNAPSHOTTER@|$snapshotter|g" \
	-e "s|@RUNC@|$(command -v runc)|g" -e "s|@BIN@|$BIN|g" hack/local/containerd.toml >"$STATE/containerd.toml"
sed -e "s|@STATE@|$STATE|g" -e "s|@POD_CIDR@|$POD_CIDR|g" hack/local/cni.conflist >"$STATE/cni/net.d/10-vmpod-local.conflist"
mkdir -p "$CAPS_CACHE"
# The node daemon runs the node's VMs; the shims ask it. As
# manifests/systemd/vm-runtime-daemon.service runs it, with this node's
# paths: its state root on disk, as VM disk overlays live there (short:
# QEMU's socket paths must stay under 108 bytes), and the warm QEMU
# capabilities.
log "starting vm-runtime daemon (the node's VMs, for the shims)"
# Under restart-always.sh, as the unit's Restart=always: test/e2e kills it.
start vmd env RESTART_ALWAYS_HOLD="$RUN/node-down" "$repo/hack/local/restart-always.sh" env TMPDIR="$RUN/tmp" "$STATE/bin/vm-runtime" daemon --socket "$RUN/vmd.sock" \
	--state-root "$STATE/vm" --capabilities-cache "$CAPS_CACHE" --metrics-address "127.0.0.1:$NODE_METRICS_PORT" --containerd-state-dir "$(realpath -m "$RUN/containerd/state")" \
	"${STATE_KEYS[@]}"
wait_for "vm-runtime daemon" 60 in_node test -S "$RUN/vmd.sock" || die "vm-runtime daemon did not serve $RUN/vmd.sock within 60s"
# The shims inherit containerd's environment: the daemon's socket. Under
# restart-always.sh, as containerd's unit restarts it: test/e2e kills it.
start containerd env RESTART_ALWAYS_HOLD="$RUN/node-down" "$repo/hack/local/restart-always.sh" env VMPOD_STATE_ROOT="$STATE/vm" VMPOD_NODE_SOCKET="$RUN/vmd.sock" TMPDIR="$RUN/tmp" \
	"$BIN/containerd" --config "$STATE/containerd.toml"
ctr() { in_node "$BIN/ctr" --address "$RUN/containerd.sock" -n k8s.io "$@"; }
wait_for containerd 60 ctr version || die "containerd did not start within 60s"
log "importing $PAUSE_IMAGE and $IMAGE"
# (ctr warns on stderr that cgroup v1 is deprecated.)
ctr images import --platform linux/amd64 "$pause_archive" >/dev/null 2>>"$STATE/logs/ctr.log"
ctr images import --platform linux/amd64 "$guest_dir/containerdisk.oci.tar" >/dev/null 2>>"$STATE/logs/ctr.log"
for a in "${images[@]}"; do
	ctr images import --platform linux/amd64 "$a" >/dev/null 2>>"$STATE/logs/ctr.log"
done

log "starting the kubelet (node $NAME at $NODE_IP)"
sed -e "s|@STATE@|$STATE|g" -e "s|@NODE_STATE@|$STATE|g" -e "s|@RUNTIME_ENDPOINT@|unix://$RUN/containerd.sock|g" \
	-e "s|@CGROUP_ROOT@|/$NAME|g" -e "s|@CERT@|kubelet|g" -e "s|@NODE_IP@|$NODE_IP|g" \
	-e "s|@DNS_IP@|$DNS_IP|g" -e "s|@CLUSTER_DOMAIN@|$CLUSTER_DOMAIN|g" hack/local/kubelet.yaml >"$STATE/kubelet.yaml"
# Under restart-always.sh, as the kubelet's unit restarts it: test/e2e
# kills it.
start kubelet env RESTART_ALWAYS_HOLD="$RUN/node-down" "$repo/hack/local/restart-always.sh" "$BIN/kubelet" --config "$STATE/kubelet.yaml" --kubeconfig "$STATE/kubelet.kubeconfig" \
	--hostname-override "$NAME" --node-ip "$NODE_IP" --root-dir /var/lib/kubelet
# kube_proxy_config NODE KUBECONFIG: the node's kube-proxy configuration.
kube_proxy_config() {
	sed -e "s|@KUBECONFIG@|$2|g" -e "s|@NODE@|$1|g" -e "s|@CLUSTER_CIDR@|$CLUSTER_CIDR|g" hack/local/kube-proxy.yaml
}
log "starting kube-proxy (node $NAME; iptables in the node's namespace)"
kube_proxy_config "$NAME" "$STATE/kube-proxy.kubeconfig" >"$STATE/kube-proxy.yaml"
start kube-proxy "$BIN/kube-proxy" --config "$STATE/kube-proxy.yaml"

# The VM-only node starts while the first registers.
if ((CRI_NODE)); then
	log "starting vm-runtime cri on the VM-only node $VM_NAME"
	sed -e "s|@STATE@|$VM_STATE|g" -e "s|@POD_CIDR@|$VM_POD_CIDR|g" hack/local/cni.conflist >"$VM_STATE/cni/net.d/10-vmpod-local.conflist"
	# As manifests/systemd/vm-runtime-cri.service runs it (restarted when it
	# ends), with this node's paths and its own QEMU uids; the cgroupfs
	# driver, as the local kubelets use (hack/local/kubelet.yaml), whatever
	# the machine's init.
	start_in holder-vm cri env RESTART_ALWAYS_HOLD="$VM_RUN/node-down" "$repo/hack/local/restart-always.sh" env TMPDIR="$RUN/tmp" "$STATE/bin/vm-runtime" cri --listen "unix://$VM_RUN/cri.sock" \
		--state-root "$VM_STATE/cri" --netns-dir "$VM_RUN/netns" --cni-conf-dir "$VM_STATE/cni/net.d" --cni-bin-dir /usr/lib/cni \
		--capabilities-cache "$CAPS_CACHE" --qemu-uids "$VM_QEMU_UIDS" --default-cgroup-parent "$VM_CGROUP_ROOT/vmpod" \
		--cgroup-driver cgroupfs --metrics-address "127.0.0.1:$VM_METRICS_PORT" "${STATE_KEYS[@]}"
	start_in holder-vm registry env TMPDIR="$RUN/tmp" "$BIN/vmpod-local-registry" -listen 127.0.0.1:80 \
		-archive "$guest_dir/containerdisk.oci.tar" -image "${IMAGE#localhost/}" -archive "${images[1]}" -image "${BUSYBOX_IMAGE#localhost/}"
	printf 'runtime-endpoint: unix://%s\nimage-endpoint: unix://%s\n' "$VM_RUN/cri.sock" "$VM_RUN/cri.sock" >"$VM_STATE/crictl.yaml"
	crictl_vm() { in_vm_node "$BIN/crictl" --config "$VM_STATE/crictl.yaml" --timeout 120s "$@"; }
	wait_for "vm-runtime cri" 60 crictl_vm version || die "vm-runtime cri did not answer within 60s"
	log "starting the kubelet (node $VM_NAME at $VM_NODE_IP, runtime vm-runtime cri)"
	{
		sed -e "s|@STATE@|$STATE|g" -e "s|@NODE_STATE@|$VM_STATE|g" -e "s|@RUNTIME_ENDPOINT@|unix://$VM_RUN/cri.sock|g" \
			-e "s|@CGROUP_ROOT@|$VM_CGROUP_ROOT|g" -e "s|@CERT@|kubelet-vm|g" -e "s|@NODE_IP@|$VM_NODE_IP|g" \
			-e "s|@DNS_IP@|$DNS_IP|g" -e "s|@CLUSTER_DOMAIN@|$CLUSTER_DOMAIN|g" hack/local/kubelet.yaml
		printf '%s\n' "# VMs only: pods that do not tolerate this stay off the node." "registerWithTaints:" \
			"- key: $VM_TAINT_KEY" '  value: "true"' "  effect: NoSchedule"
	} >"$STATE/kubelet-vm.yaml"
	start_in holder-vm kubelet-vm env RESTART_ALWAYS_HOLD="$VM_RUN/node-down" "$repo/hack/local/restart-always.sh" "$BIN/kubelet" --config "$STATE/kubelet-vm.yaml" --kubeconfig "$STATE/kubelet-vm.kubeconfig" \
		--hostname-override "$VM_NAME" --node-ip "$VM_NODE_IP" --root-dir /var/lib/kubelet
	log "starting kube-proxy (node $VM_NAME)"
	kube_proxy_config "$VM_NAME" "$STATE/kube-proxy-vm.kubeconfig" >"$STATE/kube-proxy-vm.yaml"
	start_in holder-vm kube-proxy-vm "$BIN/kube-proxy" --config "$STATE/kube-proxy-vm.yaml"
fi
wait_for "node Ready" 120 bash -c "[[ \$($BIN/kubectl --kubeconfig $OUT/kubeconfig get node $NAME -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}') == True ]]" ||
	die "node $NAME not Ready within 120s"

log "starting the labeller (ServiceAccount vmpod-labeller)"
# Its token is bound to the node (registered by now): manifests/labeller-
# policy.yaml lets the labeller change only the node its token names, as
# the token the kubelet gives the labeller's pod does.
sa_kubeconfig vmpod-labeller labeller --bound-object-kind Node --bound-object-name "$NAME"
start labeller env TMPDIR="$RUN/tmp" "$BIN/vm-runtime" labeller --node-name "$NAME" \
	--kubeconfig "$STATE/labeller.kubeconfig" --capabilities-cache "$CAPS_CACHE"
wait_for "vmpod.io/runtime=true" 120 bash -c "[[ \$($BIN/kubectl --kubeconfig $OUT/kubeconfig get node $NAME -o jsonpath='{.metadata.labels.vmpod\.io/runtime}') == true ]]" ||
	die "the labeller did not label $NAME within 120s"
# shellcheck disable=SC2016 # a go-template, not shell
log "node $NAME is Ready and labelled: $("$BIN/kubectl" --kubeconfig "$OUT/kubeconfig" get node "$NAME" -o go-template='{{range $k, $v := .metadata.labels}}{{$k}}={{$v}} {{end}}' | tr ' ' '\n' | grep -cE 'vmpod\.io/') vmpod labels"

log "cluster DNS: CoreDNS on $NAME, Service kube-dns at $DNS_IP (hack/local/cluster-dns.yaml)"
sed -e "s|@DNS_IP@|$DNS_IP|g" -e "s|@IMAGE@|$COREDNS_IMAGE|g" hack/local/cluster-dns.yaml | kubectl_node apply -f - >>"$STATE/logs/apply.log"

if ((CRI_NODE)); then
	wait_for "node $VM_NAME Ready" 120 bash -c "[[ \$($BIN/kubectl --kubeconfig $OUT/kubeconfig get node $VM_NAME -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}') == True ]]" ||
		die "node $VM_NAME not Ready within 120s"
	log "starting the VM-only node's labeller"
	SERVER=https://$VM_LINK_IP:6443 sa_kubeconfig vmpod-labeller labeller-vm --bound-object-kind Node --bound-object-name "$VM_NAME"
	start_in holder-vm labeller-vm env TMPDIR="$RUN/tmp" "$BIN/vm-runtime" labeller --node-name "$VM_NAME" \
		--kubeconfig "$STATE/labeller-vm.kubeconfig" --capabilities-cache "$CAPS_CACHE"
	log "pulling $IMAGE into vm-runtime cri (from the node's registry)"
	crictl_vm pull "$IMAGE" >/dev/null
	wait_for "vmpod.io/runtime=true on $VM_NAME" 120 bash -c "[[ \$($BIN/kubectl --kubeconfig $OUT/kubeconfig get node $VM_NAME -o jsonpath='{.metadata.labels.vmpod\.io/runtime}') == true ]]" ||
		die "the labeller did not label $VM_NAME within 120s"
	log "node $VM_NAME is Ready, labelled and tainted $VM_TAINT_KEY=true:NoSchedule"
fi

wait_for "CoreDNS ready" 120 bash -c "[[ \$($BIN/kubectl --kubeconfig $OUT/kubeconfig -n kube-system get deploy coredns -o jsonpath='{.status.readyReplicas}') == 1 ]]" || {
	kubectl_node -n kube-system describe pods -l k8s-app=kube-dns >&2 || true
	die "CoreDNS not ready within 120s"
}

# Block PersistentVolumes, as a node's local disks are offered to pods:
# per node, $PV_PER_NODE sparse images of $PV_SIZE_MIB MiB in $STATE/disks, each
# a loop device of the host (global: both nodes' mount namespaces see
# it), each a `local` PV of volumeMode Block bound to its node, in the
# StorageClass $BLOCK_CLASS (no provisioner; a claim binds when its first
# pod is scheduled). Retain: a deleted claim's PV is Released with its
# data, as a local disk is, and an admin (or a test) clears its claimRef
# to offer it again. local-down detaches the loop devices (and the ones
# the kubelet adds on top while it maps a PV for a pod).
log "block PersistentVolumes: StorageClass $BLOCK_CLASS, $PV_PER_NODE local PVs of ${PV_SIZE_MIB}Mi per node (loop devices)"
pv_nodes=("$NAME")
if ((CRI_NODE)); then pv_nodes+=("$VM_NAME"); fi
{
	printf '%s\n' "apiVersion: storage.k8s.io/v1" "kind: StorageClass" "metadata:" "  name: $BLOCK_CLASS" \
		"provisioner: kubernetes.io/no-provisioner" "volumeBindingMode: WaitForFirstConsumer" "reclaimPolicy: Retain"
	for pv_node in "${pv_nodes[@]}"; do
		for ((i = 0; i < PV_PER_NODE; i++)); do
			img=$STATE/disks/pv-$pv_node-$i.img
			truncate -s "${PV_SIZE_MIB}M" "$img"
			dev=$(losetup --find --show "$img") || die "no loop device for $img (the block PersistentVolumes need one)"
			printf '%s\n' "---" "apiVersion: v1" "kind: PersistentVolume" "metadata:" "  name: $pv_node-disk-$i" \
				"  labels: {vmpod.io/local-disk: \"$pv_node-$i\"}" \
				"spec:" "  capacity: {storage: ${PV_SIZE_MIB}Mi}" "  volumeMode: Block" "  accessModes: [ReadWriteOnce]" \
				"  persistentVolumeReclaimPolicy: Retain" "  storageClassName: $BLOCK_CLASS" "  local: {path: $dev}" \
				"  nodeAffinity:" "    required:" "      nodeSelectorTerms:" \
				"      - matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [$pv_node]}]"
		done
	done
} >"$STATE/block-pvs.yaml"
kubectl_node apply -f "$STATE/block-pvs.yaml" >>"$STATE/logs/apply.log"

# State for hack/local-down.sh, hack/local/kubectl and the e2e tests.
cat >"$OUT/env" <<EOF
# Written by hack/local-up.sh: the cluster for kubectl and the e2e tests.
export KUBECONFIG=$OUT/kubeconfig
export VMPOD_E2E_CGROUP_ROOT=/$NAME
export VMPOD_E2E_NODE_EXEC="nsenter --target $(holder_pid) --mount --net --"
export VMPOD_E2E_STATE_ROOT=$STATE/vm
export VMPOD_E2E_NODE_DOWN=$RUN/node-down
export VMPOD_E2E_NODE_VOLATILE="$RUN/containerd/state $RUN/vmd.sock"
export VMPOD_E2E_METRICS_URL=http://127.0.0.1:$NODE_METRICS_PORT/metrics
export VMPOD_E2E_IMAGE=$IMAGE
export VMPOD_E2E_KUBECTL=$BIN/kubectl
export VMPOD_E2E_BUSYBOX_IMAGE=$BUSYBOX_IMAGE
export VMPOD_E2E_NODE_IP=$NODE_IP
export VMPOD_E2E_BLOCK_CLASS=$BLOCK_CLASS
export VMPOD_E2E_CTR="nsenter --target $(holder_pid) --mount --net -- $BIN/ctr --address $RUN/containerd.sock -n k8s.io"
EOF
if ((CRI_NODE)); then
	cat >>"$OUT/env" <<EOF
# The VM-only node (vm-runtime cri): test/e2e's TestCRINode.
export VMPOD_E2E_CRI_NODE=$VM_NAME
export VMPOD_E2E_CRI_NODE_EXEC="nsenter --target $(holder_pid holder-vm) --mount --net --"
export VMPOD_E2E_CRI_STATE_ROOT=$VM_STATE/cri
export VMPOD_E2E_CRI_NODE_DOWN=$VM_RUN/node-down
export VMPOD_E2E_CRI_NODE_VOLATILE="$VM_RUN/netns $VM_RUN/cri.sock"
export VMPOD_E2E_CRI_METRICS_URL=http://127.0.0.1:$VM_METRICS_PORT/metrics
export VMPOD_E2E_CRI_NETNS_DIR=$VM_RUN/netns
export VMPOD_E2E_CRI_CGROUP_ROOT=$VM_CGROUP_ROOT
# The node's registry (vmpod-local-registry), on the loopback of its
# network namespace: test/e2e pushes checkpoint images there.
export VMPOD_E2E_CRI_REGISTRY=127.0.0.1:80
export VMPOD_E2E_CRI_NETNS=/proc/$(holder_pid holder-vm)/ns/net
EOF
fi
trap - ERR

# --- 6. The demo ----------------------------------------------------------
if [[ ${VMPOD_LOCAL_NO_DEMO:-} == 1 ]]; then
	log "cluster ready (VMPOD_LOCAL_NO_DEMO=1: no example pod)"
	exit 0
fi
export KUBECONFIG=$OUT/kubeconfig
k() { "$BIN/kubectl" "$@"; }
log "kubectl apply -f examples/test-guest.yaml"
start_ms=$(date +%s%3N)
k apply -f examples/test-guest.yaml >/dev/null
running_ms="" serial_ms="" init_ms=""
for ((i = 0; i < 600; i++)); do # 5 minutes at most
	now=$(date +%s%3N)
	if [[ -z $running_ms && $(k get pod test-guest -o jsonpath='{.status.phase}') == Running ]]; then
		running_ms=$((now - start_ms))
		log "  pod Running after $((running_ms / 1000)).$((running_ms % 1000 / 100))s"
	fi
	console=""
	[[ -n $running_ms ]] && console=$(k logs test-guest 2>/dev/null || true)
	if [[ -z $serial_ms && -n $console ]]; then
		serial_ms=$((now - start_ms))
		log "  first serial line (the guest kernel's) after $((serial_ms / 1000)).$((serial_ms % 1000 / 100))s"
	fi
	if [[ -z $init_ms && $console == *"VMPOD-GUEST: init"* ]]; then
		init_ms=$((now - start_ms))
		log "  guest /init after $((init_ms / 1000)).$((init_ms % 1000 / 100))s"
	fi
	[[ $console == *"VMPOD-GUEST: ready"* ]] && break
	sleep 0.5
done
[[ $console == *"VMPOD-GUEST: ready"* ]] || {
	k describe pod test-guest >&2 || true
	die "the guest did not become ready within 5 minutes"
}
ip=$(k get pod test-guest -o jsonpath='{.status.podIP}')

echo
echo "== kubectl get pod test-guest -o wide"
k get pod test-guest -o wide
echo
echo "== kubectl logs test-guest   (the VM's serial console: the first lines, and the test guest's markers)"
printf '%s\n' "$console" | head -n 4
echo "..."
printf '%s\n' "$console" | grep 'VMPOD-GUEST' || true
echo
echo "== HTTP from the guest at its pod IP, http://$ip:8080/ (from the node's namespace)"
in_node bash -c "exec 3<>/dev/tcp/$ip/8080 && printf 'GET / HTTP/1.0\r\n\r\n' >&3 && timeout 5 cat <&3" || true
echo
echo "== Timings: kubectl apply -> Running ${running_ms}ms, -> first serial line ${serial_ms}ms, -> guest /init ${init_ms}ms"
cat <<EOF

== The cluster is up ($((SECONDS - t0))s). Use it from this machine's shell:

  export KUBECONFIG=$OUT/kubeconfig PATH=$BIN:\$PATH
  kubectl get nodes --show-labels
  kubectl logs -f test-guest          # the serial console
  kubectl delete pod test-guest       # ACPI shutdown (kubectl logs -f shows it)
  (source $OUT/env && go test -tags e2e -count=1 ./test/e2e)   # the end-to-end tests

  Inside the node's network namespace (pod IPs, the kubelet):
  nsenter --target $(holder_pid) --mount --net -- bash
$(if ((CRI_NODE)); then
	echo "  Inside the VM-only node's ($VM_NAME: vm-runtime cri, no containerd):"
	echo "  nsenter --target $(holder_pid holder-vm) --mount --net -- bash"
fi)

  Logs: $STATE/logs.  Remove everything: hack/local-down.sh
EOF
