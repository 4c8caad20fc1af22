# shellcheck shell=bash disable=SC2034
# Shared by hack/local-up.sh and hack/local-down.sh (sourced, not run).
#
# Everything the local cluster makes is recorded under $ROOT as it is made:
#   pids         "name pid starttime" of each process local-up started
#   made         one line per host object: netns NAME, cgroup DIR,
#                mountpoint DIR (created on the host for a bind mount),
#                sysctl KEY VALUE (the value before the kubelet changed it)
# local-down undoes exactly those, so it never touches anything by name.

NAME=vmpod-local
ROOT=${VMPOD_LOCAL_ROOT:-/tmp/vmpod-local}
NETNS=/run/netns/$NAME
NODE_IP=10.86.0.1
PEER_IP=10.86.0.2
POD_CIDR=10.244.0.0/24
SERVICE_CIDR=10.96.0.0/24
HOST_PORT=${VMPOD_LOCAL_PORT:-16443}
PAUSE_IMAGE=localhost/vmpod/pause:v1

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BIN=$repo/_output/bin
OUT=$repo/_output/local
CAPS_CACHE=$repo/_output/cache/qemu-capabilities

export PATH=$PATH:/usr/local/go/bin:/usr/sbin:/sbin

t0=$SECONDS
log() { printf '[%4ds] %s\n' $((SECONDS - t0)) "$*" >&2; }
die() {
	log "error: $*"
	exit 1
}

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

holder_pid() { awk '$1 == "holder" { print $2 }' "$ROOT/pids" 2>/dev/null; }

# in_node CMD...: run CMD in the node's network and mount namespaces.
in_node() { nsenter --target "$(holder_pid)" --mount --net -- "$@"; }

# record KIND ARGS...: note a host object to undo.
record() { echo "$*" >>"$ROOT/made"; }

# start NAME CMD...: start a long-running component in the node, logging to
# $ROOT/logs/NAME.log, and record its PID. nsenter execs CMD for the mount
# and network namespaces (no fork), so $! is CMD's PID.
start() {
	local name=$1
	shift
	# A simple command, not the in_node function: bash would fork a
	# subshell for a function, and $! would be the subshell's PID.
	nsenter --target "$(holder_pid)" --mount --net -- "$@" >"$ROOT/logs/$name.log" 2>&1 &
	local pid=$!
	sleep 0.1
	echo "$name $pid $(starttime "$pid" || echo 0)" >>"$ROOT/pids"
}

# stop_pid NAME PID START [GRACE]: SIGTERM, then SIGKILL after GRACE seconds.
stop_pid() {
	local name=$1 pid=$2 start=$3 grace=${4:-20} i
	alive "$pid" "$start" || return 0
	log "stopping $name (pid $pid)"
	kill -TERM "$pid" 2>/dev/null || true
	for ((i = 0; i < grace * 10; i++)); do
		alive "$pid" "$start" || return 0
		sleep 0.1
	done
	alive "$pid" "$start" && kill -KILL "$pid" 2>/dev/null
	for ((i = 0; i < 50; i++)); do
		alive "$pid" "$start" || return 0
		sleep 0.1
	done
	log "warning: $name (pid $pid) still running"
}

# stop NAME [GRACE]: stop a recorded component.
stop() {
	local name pid st
	while read -r name pid st; do
		[[ $name == "$1" ]] && stop_pid "$name" "$pid" "$st" "${2:-20}"
	done <"$ROOT/pids"
	return 0
}

# wait_for WHAT SECONDS CMD...: poll CMD every half second, bounded.
wait_for() {
	local what=$1 secs=$2 i
	shift 2
	for ((i = 0; i < secs * 2; i++)); do
		if "$@" >/dev/null 2>&1; then return 0; fi
		sleep 0.5
	done
	return 1
}

kubectl_node() { in_node "$BIN/kubectl" --kubeconfig "$ROOT/admin.kubeconfig" "$@"; }
