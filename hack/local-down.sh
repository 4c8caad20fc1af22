#!/usr/bin/env bash
# Removes the local cluster hack/local-up.sh made (make demo-down): the VM
# pods first (so the guests get their ACPI shutdown), then every process it
# started, by the PIDs it recorded, and the shims and QEMU processes
# containerd started in the node's mount namespace; then the network
# namespace, the cgroups, the mount points it made on the host, the global
# sysctls the kubelet changed, and its files. Safe to run again, and after
# a local-up that failed half way.
set -euo pipefail
# shellcheck source=hack/local/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/local/lib.sh"

[[ $(id -u) -eq 0 ]] || die "run as root"
if [[ ! -d $ROOT ]]; then
	log "no local cluster in $ROOT"
	rm -rf "$OUT"
	exit 0
fi
touch "$ROOT/pids" "$ROOT/made"

running() { # running NAME: the recorded component still runs
	local name pid st
	while read -r name pid st; do
		[[ $name == "$1" ]] && alive "$pid" "$st" && return 0
	done <"$ROOT/pids"
	return 1
}

# 1. Pods: deleted through the API while the kubelet runs, so that each VM
# is shut down as a user's would be. Bounded.
if running kube-apiserver && running kubelet && running holder; then
	log "deleting all pods (ACPI shutdown of the VMs)"
	kubectl_node delete pods --all --all-namespaces --wait=true --timeout=90s >/dev/null 2>&1 ||
		log "warning: some pods did not go within 90s"
fi

# 2. The node's own processes, consumers first.
stop labeller
stop scheduler
stop kubelet
if running containerd && running holder; then
	# Anything the kubelet left: crictl stops and removes it through the shims.
	crictl() { in_node "$BIN/crictl" --runtime-endpoint "unix://$ROOT/containerd.sock" --timeout 60s "$@"; }
	for p in $(crictl pods -q 2>/dev/null); do
		crictl stopp "$p" >/dev/null 2>&1 || true
		crictl rmp -f "$p" >/dev/null 2>&1 || true
	done
fi
stop containerd
stop kube-apiserver
stop etcd
stop forward 5

# 3. Whatever containerd started and outlived it (shims re-parent to init,
# QEMU outlives a killed shim), identified by the node's mount namespace,
# which only processes started inside it share; only while the holder
# lives, so the namespace's inode cannot have been reused. Bounded.
if running holder; then
	hpid=$(holder_pid)
	mnt=$(readlink "/proc/$hpid/ns/mnt")
	for ((round = 0; round < 10; round++)); do
		left=()
		for d in /proc/[0-9]*; do
			pid=${d#/proc/}
			[[ $pid == "$hpid" || $pid == "$$" ]] && continue
			[[ $(readlink "$d/ns/mnt" 2>/dev/null) == "$mnt" ]] && left+=("$pid")
		done
		((${#left[@]} == 0)) && break
		log "killing ${#left[@]} leftover process(es) in the node: ${left[*]}"
		for pid in "${left[@]}"; do
			st=$(starttime "$pid") && stop_pid "process" "$pid" "$st" 5
		done
	done
fi
stop holder 5

# 4. Host objects, newest first.
undo() {
	local kind=$1 a=$2 b=${3:-} d i
	case $kind in
	netns)
		if [[ -e /run/netns/$a ]] && ! ip netns delete "$a"; then
			log "warning: ip netns delete $a failed"
		fi
		;;
	cgroup)
		# Deepest first; the kernel may still count exiting tasks for a moment.
		[[ -d $a ]] || return 0
		while read -r d; do
			for ((i = 0; i < 50; i++)); do
				if rmdir "$d" 2>/dev/null || [[ ! -d $d ]]; then break; fi
				sleep 0.1
			done
			if [[ -d $d ]]; then log "warning: cgroup $d is still there"; fi
		done < <(find "$a" -depth -type d)
		;;
	mountpoint)
		if [[ -d $a ]] && ! rmdir "$a" 2>/dev/null; then log "warning: $a (made for a bind mount) is not empty; left"; fi
		;;
	sysctl)
		if ! sysctl -q -w "$a=$b"; then log "warning: could not restore $a=$b"; fi
		;;
	esac
}
while read -r kind a b; do
	undo "$kind" "$a" "$b"
done < <(tac "$ROOT/made")

# 5. Files. Mounts were in the node's mount namespace and went with it;
# anything that reached the host's is detached first.
while read -r mp; do
	umount -l "$mp" 2>/dev/null || true
done < <(awk -v r="$ROOT" '$5 == r || index($5, r "/") == 1 { print $5 }' /proc/self/mountinfo | sort -r)
rm -rf "$ROOT" "$OUT"
log "local cluster removed"
