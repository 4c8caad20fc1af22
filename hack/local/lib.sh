# shellcheck shell=bash disable=SC2034
# Shared by hack/local-up.sh and hack/local-down.sh (sourced, not run).
#
# Where the local cluster keeps things:
#   $STATE (/var/lib/vmpod-local)  the record, and the cluster's data: etcd,
#          certificates, kubeconfigs, images, the kubelet's dirs, logs.
#          It survives a reboot and a wiped /tmp, so local-down always knows
#          what an earlier local-up made.
#   $RUN   (/run/vmpod-local)      sockets, containerd's state, the VMs'
#          state dirs (QEMU's socket paths must stay short).
# The record, in $STATE, is written before each thing is made:
#   boot_id      the boot the record belongs to (/proc/sys/kernel/random/boot_id)
#   pids         "name pid starttime" of each process local-up started
#   made         one line per host object: netns NAME, cgroup DIR,
#                mountpoint DIR (created on the host for a bind mount),
#                sysctl KEY VALUE (the value before the kubelet changed it)
# local-down undoes what the record names, then sweeps what an earlier run
# can have left without a record (the namespace, cgroups, mounts, files of
# $NAME), and checks that each thing is gone before it says so.

NAME=${VMPOD_LOCAL_NAME:-vmpod-local}
STATE=${VMPOD_LOCAL_STATE:-/var/lib/$NAME}
RUN=${VMPOD_LOCAL_RUN:-/run/$NAME}
# Where the record lived before it moved to $STATE: swept, never trusted.
LEGACY=${VMPOD_LOCAL_LEGACY-/tmp/vmpod-local}
NETNS=/run/netns/$NAME
NODE_IP=10.86.0.1
PEER_IP=10.86.0.2
POD_CIDR=10.244.0.0/24
SERVICE_CIDR=10.96.0.0/24
# Every node's pod CIDR is inside it (kube-proxy's clusterCIDR).
CLUSTER_CIDR=10.244.0.0/16
# The cluster DNS Service (hack/local/cluster-dns.yaml) and domain.
DNS_IP=10.96.0.10
CLUSTER_DOMAIN=cluster.local
HOST_PORT=${VMPOD_LOCAL_PORT:-16443}
PAUSE_IMAGE=localhost/vmpod/pause:v1
# hack/local/images.sh's images.
COREDNS_IMAGE=localhost/vmpod/coredns:v1.15.0
BUSYBOX_IMAGE=localhost/vmpod/busybox:v1

# The second node, VM-only: its kubelet talks to `vm-runtime cri` (no
# containerd). Its own network namespace ($VM_NAME), joined to the first
# node's by a veth pair ($VM_LINK_IP there, $VM_NODE_IP here); its own
# mount namespace, state ($VM_STATE: the CRI server's images, pods, libvirt
# root and checkpoints; on disk) and sockets ($VM_RUN); its kubelet's
# cgroupRoot below the first node's cgroup ($VM_CGROUP_ROOT), so that
# local-down's cgroup handling covers it. VMPOD_LOCAL_CRI_NODE=0: no
# second node.
CRI_NODE=${VMPOD_LOCAL_CRI_NODE:-1}
VM_NAME=$NAME-vm
VM_NETNS=/run/netns/$VM_NAME
VM_LINK_IP=10.86.1.1
VM_NODE_IP=10.86.1.2
VM_POD_CIDR=10.244.1.0/24
VM_STATE=$STATE/vmnode
# The size of each node's state root (local-up's state_fs).
STATE_FS_SIZE=${VMPOD_LOCAL_STATE_FS_SIZE:-4G}
VM_RUN=$RUN/vmnode
VM_CGROUP_ROOT=/$NAME/vmnode
# The uids QEMU runs as on this node: the range after the first node's
# shims' (the jail's default), so that no two QEMUs of the machine share one.
VM_QEMU_UIDS=1879113728:65536
# Where vm-runtime cri serves its metrics, on the node's loopback (in its
# network namespace; test/e2e reads them there).
VM_METRICS_PORT=9470
# Where the containerd node's vm-runtime daemon serves its metrics, on that
# node's loopback.
NODE_METRICS_PORT=9471
# The taint that keeps pods off the VM-only node unless they tolerate it.
VM_TAINT_KEY=vmpod.io/vm-only
# The block PersistentVolumes local-up offers on each node: loop devices
# over sparse images in $STATE/disks, in this StorageClass.
BLOCK_CLASS=vmpod-local-block
PV_PER_NODE=4
PV_SIZE_MIB=64

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BIN=$repo/_output/bin
OUT=${VMPOD_LOCAL_OUT:-$repo/_output/local}
CAPS_CACHE=$repo/_output/cache/qemu-capabilities

export PATH=$PATH:/usr/local/go/bin:/usr/sbin:/sbin

t0=$SECONDS
log() { printf '[%4ds] %s\n' $((SECONDS - t0)) "$*" >&2; }
die() {
	log "error: $*"
	exit 1
}

boot_id() { cat /proc/sys/kernel/random/boot_id; }

# same_boot: the record was written during this boot, so its PIDs and
# start times can still name the processes it started.
same_boot() { [[ -f $STATE/boot_id && $(cat "$STATE/boot_id") == "$(boot_id)" ]]; }

# starttime PID: field 22 of /proc/PID/stat, which tells a PID from its reuse.
starttime() {
	local s
	s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	s=${s##*) }
	# shellcheck disable=SC2086
	set -- $s
	echo "${20}"
}

# alive PID START: the process that started at START still runs (not a zombie).
alive() {
	local st
	st=$(starttime "$1") || return 1
	[[ $st == "$2" ]] || return 1
	[[ $(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) != Z ]]
}

# holder_pid [NAME]: the PID of the process that keeps a node's mount
# namespace: holder (the first node, the default) or holder-vm.
holder_pid() { awk -v n="${1:-holder}" '$1 == n { print $2 }' "$STATE/pids" 2>/dev/null; }

# in_node CMD...: run CMD in the node's network and mount namespaces.
in_node() { nsenter --target "$(holder_pid)" --mount --net -- "$@"; }
# in_vm_node CMD...: the same in the VM-only node's.
in_vm_node() { nsenter --target "$(holder_pid holder-vm)" --mount --net -- "$@"; }

# record KIND ARGS...: note a host object to undo, before making it.
record() { echo "$*" >>"$STATE/made"; }

# record_pid NAME PID: note a process local-up started.
record_pid() { echo "$1 $2 $(starttime "$2" || echo 0)" >>"$STATE/pids"; }

# start NAME CMD...: start a long-running component in the node, logging to
# $STATE/logs/NAME.log, and record its PID. nsenter execs CMD for the mount
# and network namespaces (no fork), so $! is CMD's PID.
start() { start_in holder "$@"; }

# start_in HOLDER NAME CMD...: start as start does, in the namespaces that
# the recorded process HOLDER keeps (holder or holder-vm).
start_in() {
	local holder=$1 name=$2
	shift 2
	# A simple command, not the in_node function: bash would fork a
	# subshell for a function, and $! would be the subshell's PID.
	nsenter --target "$(holder_pid "$holder")" --mount --net -- "$@" >"$STATE/logs/$name.log" 2>&1 &
	local pid=$!
	# Record at once (the start time is read from /proc, which has it
	# from the fork on), so that a local-up killed here leaves a record.
	record_pid "$name" "$pid"
}

# stop_pid NAME PID START [GRACE]: SIGTERM, then SIGKILL after GRACE
# seconds. Fails if the process still runs.
stop_pid() {
	local name=$1 pid=$2 start=$3 grace=${4:-20} i
	alive "$pid" "$start" || return 0
	log "stopping $name (pid $pid)"
	kill -TERM "$pid" 2>/dev/null || true
	for ((i = 1; i <= grace * 10; i++)); do
		alive "$pid" "$start" || return 0
		((i % 50 == 0)) && log "  waiting for $name (pid $pid) to exit: $((i / 10))s of ${grace}s, then SIGKILL"
		sleep 0.1
	done
	log "  $name (pid $pid) did not exit within ${grace}s: SIGKILL"
	alive "$pid" "$start" && kill -KILL "$pid" 2>/dev/null
	for ((i = 0; i < 50; i++)); do
		alive "$pid" "$start" || return 0
		sleep 0.1
	done
	log "error: $name (pid $pid) still runs after SIGKILL"
	return 1
}

# stop NAME [GRACE]: stop a recorded component.
stop() {
	local name pid st rc=0
	while read -r name pid st; do
		[[ $name == "$1" ]] || continue
		stop_pid "$name" "$pid" "$st" "${2:-20}" || rc=1
	done <"$STATE/pids"
	return $rc
}

# wait_for WHAT SECONDS CMD...: poll CMD every half second, bounded,
# saying every 10 seconds what it waits for.
wait_for() {
	local what=$1 secs=$2 i
	shift 2
	for ((i = 1; i <= secs * 2; i++)); do
		if "$@" >/dev/null 2>&1; then return 0; fi
		((i % 20 == 0)) && log "  waiting for $what: $((i / 2))s of ${secs}s"
		sleep 0.5
	done
	return 1
}

# cgroup_mounts: the mount point of every cgroup hierarchy (v1 and v2).
cgroup_mounts() {
	awk '{ for (i = 7; i <= NF; i++) if ($i == "-") { if ($(i + 1) == "cgroup" || $(i + 1) == "cgroup2") print $5; break } }' /proc/self/mountinfo
}

# mounts_under DIR...: host mount points at or below any DIR, deepest first.
mounts_under() {
	local d
	for d in "$@"; do
		[[ -n $d ]] || continue
		awk -v r="$d" '$5 == r || index($5, r "/") == 1 { print $5 }' /proc/self/mountinfo
	done | sort -ru
}

kubectl_node() { in_node "$BIN/kubectl" --kubeconfig "$STATE/admin.kubeconfig" "$@"; }
