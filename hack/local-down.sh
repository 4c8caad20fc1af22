#!/usr/bin/env bash
# Removes the local cluster hack/local-up.sh made (make demo-down), both
# its nodes, and whatever an earlier run left, with or without its record:
#
#  1. with a record of this boot: the VM pods first (so the guests get their
#     ACPI shutdown), then every process local-up started, by the PID and
#     start time it recorded, and what runs in the node's mount namespace or
#     in the cgroups local-up made (containerd's shims, QEMU);
#  2. a process of $NAME that no record names (found in its network
#     namespace, its cgroups, or a mount namespace with its mounts) is
#     reported, never killed, and then nothing else is removed: it may be a
#     running cluster whose record was lost;
#  3. the host objects the record names: the network namespace, cgroups,
#     mount points made on the host, the global sysctls the kubelet changed;
#  4. a sweep that needs no record: host mounts under $STATE, $RUN and the
#     old /tmp/vmpod-local, loop devices still bound to the nodes' state
#     root images, /run/netns/$NAME (mounted or a file left by a
#     reboot), $NAME's cgroup tree in every hierarchy (deepest first), the
#     files.
#
# Each removal is checked before it is reported; anything that could not be
# removed is an error, local-down exits 1 and keeps the record for the next
# run. Safe to run again, and after a local-up that failed half way.
set -uo pipefail
# shellcheck source=hack/local/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/local/lib.sh"

[[ $(id -u) -eq 0 ]] || die "run as root"

failed=0 found=0
fail() {
	log "error: $*"
	failed=1
}
removed() {
	log "removed $*"
	found=1
}

# --- What runs ------------------------------------------------------------

# ns_inode FILE: the inode of the namespace bind-mounted at FILE.
ns_inode() { stat -L -c %i "$1" 2>/dev/null; }

is_mountpoint() { awk -v p="$1" '$5 == p { f = 1 } END { exit !f }' /proc/self/mountinfo; }

# ours PID: why process PID belongs to $NAME (its network namespace or
# the VM-only node's, a cgroup below /$NAME, or a mount namespace with
# mounts of $NAME's dirs); fails if it does not.
self_mnt=$(readlink /proc/self/ns/mnt)
netns_link="" vm_netns_link=""
ours() {
	local pid=$1 l
	l=$(readlink "/proc/$pid/ns/net" 2>/dev/null)
	if [[ -n $netns_link && $l == "$netns_link" ]]; then
		echo "in network namespace $NAME"
		return 0
	fi
	if [[ -n $vm_netns_link && $l == "$vm_netns_link" ]]; then
		echo "in network namespace $VM_NAME"
		return 0
	fi
	if grep -qE "^[0-9]+:[^:]*:/$NAME(/|\$)" "/proc/$pid/cgroup" 2>/dev/null; then
		echo "in cgroup /$NAME"
		return 0
	fi
	l=$(readlink "/proc/$pid/ns/mnt" 2>/dev/null) || return 1
	[[ $l != "$self_mnt" ]] || return 1
	if awk -v a="$STATE" -v b="$RUN" -v c="${LEGACY:-/nonexistent}" \
		'index($5, a "/") == 1 || index($5, b "/") == 1 || index($5, c "/") == 1 { f = 1 } END { exit !f }' \
		"/proc/$pid/mountinfo" 2>/dev/null; then
		echo "in a mount namespace with mounts of $STATE or $RUN"
		return 0
	fi
	return 1
}

# unrecorded: list processes of $NAME that no record names (after the
# recorded ones were stopped) as "pid (comm): why".
unrecorded() {
	local d pid why
	netns_link="" vm_netns_link=""
	if is_mountpoint "$NETNS"; then netns_link="net:[$(ns_inode "$NETNS")]"; fi
	if is_mountpoint "$VM_NETNS"; then vm_netns_link="net:[$(ns_inode "$VM_NETNS")]"; fi
	for d in /proc/[0-9]*; do
		pid=${d#/proc/}
		[[ $pid == "$$" || $pid == "$BASHPID" ]] && continue
		why=$(ours "$pid") || continue
		echo "$pid ($(cat "$d/comm" 2>/dev/null)): $why"
	done
}

# --- 1. With a record of this boot: the pods and the processes -----------

have_record=0
if [[ -f $STATE/made || -f $STATE/pids ]]; then
	have_record=1 found=1
	touch "$STATE/pids" "$STATE/made"
fi
live=0
if ((have_record)); then
	if same_boot; then
		live=1
	else
		log "the record in $STATE is from an earlier boot: the processes, cgroups and namespace mounts it names ended with that boot"
	fi
fi

running() { # running NAME: the recorded component still runs
	local name pid st
	while read -r name pid st; do
		[[ $name == "$1" ]] && alive "$pid" "$st" && return 0
	done <"$STATE/pids"
	return 1
}

if ((live)); then
	found=1
	# No controller may make new pods while they go (a Deployment's
	# ReplicaSet would replace each one deleted).
	stop kube-controller-manager || fail "kube-controller-manager still runs"
	# Pods: deleted through the API while the kubelets run, so that each
	# VM is shut down as a user's would be. Bounded.
	if running kube-apiserver && running kubelet && running holder; then
		log "deleting all pods (ACPI shutdown of the VMs; at most 90s)"
		kubectl_node delete pods --all --all-namespaces --wait=false >/dev/null 2>&1 || true
		for ((i = 1; i <= 180; i++)); do
			n=$(kubectl_node get pods --all-namespaces --no-headers 2>/dev/null | wc -l)
			((n == 0)) && break
			((i % 20 == 0)) && log "  waiting for $n pod(s) to go: $((i / 2))s of 90s"
			sleep 0.5
		done
		((n == 0)) || log "warning: $n pod(s) still there after 90s; stopping the node anyway"
	fi

	# The node's own processes, consumers first.
	stop labeller || fail "the labeller still runs"
	stop labeller-vm || fail "the VM-only node's labeller still runs"
	stop scheduler || fail "the scheduler still runs"
	stop kubelet || fail "the kubelet still runs"
	stop kubelet-vm || fail "the VM-only node's kubelet still runs"
	stop kube-proxy || fail "kube-proxy still runs"
	stop kube-proxy-vm || fail "the VM-only node's kube-proxy still runs"
	if running cri && running holder-vm; then
		# Anything the VM-only node's kubelet left, through vm-runtime cri.
		crictl_vm() { in_vm_node "$BIN/crictl" --config "$VM_STATE/crictl.yaml" --runtime-endpoint "unix://$VM_RUN/cri.sock" --timeout 60s "$@"; }
		for p in $(crictl_vm pods -q 2>/dev/null); do
			log "removing pod sandbox $p through vm-runtime cri"
			crictl_vm stopp "$p" >/dev/null 2>&1 || true
			crictl_vm rmp -f "$p" >/dev/null 2>&1 || true
		done
	fi
	stop cri || fail "vm-runtime cri still runs"
	stop registry 5 || fail "the VM-only node's registry still runs"
	if running containerd && running holder; then
		# Anything the kubelet left: crictl stops and removes it through the shims.
		crictl() { in_node "$BIN/crictl" --runtime-endpoint "unix://$RUN/containerd.sock" --timeout 60s "$@"; }
		for p in $(crictl pods -q 2>/dev/null); do
			log "removing pod sandbox $p through containerd"
			crictl stopp "$p" >/dev/null 2>&1 || true
			crictl rmp -f "$p" >/dev/null 2>&1 || true
		done
	fi
	stop containerd || fail "containerd still runs"
	# After containerd: the shims' last deletes go through it.
	stop vmd || fail "vm-runtime daemon still runs"
	stop kube-apiserver || fail "kube-apiserver still runs"
	stop etcd || fail "etcd still runs"
	stop forward 5 || fail "the apiserver forwarder still runs"

	# What the runtimes started and outlived them (shims re-parent to
	# init, QEMU outlives a killed shim or CRI server): the processes in
	# the nodes' mount namespaces (only while the recorded holders keep
	# them, so their inodes cannot have been reused) and in the cgroups
	# the record names (which exist, so only this cluster's kubelets and
	# runtimes put tasks there).
	hpid=$(holder_pid) vhpid=$(holder_pid holder-vm)
	mnt="" vmnt=""
	if running holder; then mnt=$(readlink "/proc/$hpid/ns/mnt"); fi
	if running holder-vm; then vmnt=$(readlink "/proc/$vhpid/ns/mnt"); fi
	mapfile -t cgroups < <(awk '$1 == "cgroup" { print $2 }' "$STATE/made")
	for ((round = 0; round < 10; round++)); do
		left=()
		if [[ -n $mnt$vmnt ]]; then
			for d in /proc/[0-9]*; do
				pid=${d#/proc/}
				[[ $pid == "$hpid" || $pid == "$vhpid" || $pid == "$$" ]] && continue
				l=$(readlink "$d/ns/mnt" 2>/dev/null) || continue
				[[ -n $l && ($l == "$mnt" || $l == "$vmnt") ]] && left+=("$pid")
			done
		fi
		for cg in "${cgroups[@]}"; do
			[[ -d $cg ]] || continue
			while read -r pid; do
				[[ -n $pid && $pid != "$hpid" && $pid != "$vhpid" ]] && left+=("$pid")
			done < <(find "$cg" -name cgroup.procs -exec cat {} + 2>/dev/null)
		done
		mapfile -t left < <(printf '%s\n' "${left[@]}" | sort -un | sed '/^$/d')
		((${#left[@]} == 0)) && break
		log "stopping ${#left[@]} process(es) left in the node: ${left[*]}"
		for pid in "${left[@]}"; do
			st=$(starttime "$pid") && { stop_pid "$(cat "/proc/$pid/comm" 2>/dev/null || echo process)" "$pid" "$st" 5 || true; }
		done
	done
	((${#left[@]} == 0)) || fail "processes still run in the node: ${left[*]}"

	# The VM-only node's mount namespace, as the first node's below.
	if [[ -n $vmnt ]]; then
		stop holder-vm 5 || fail "the VM-only node's namespace holder (pid $vhpid) still runs"
		users=0
		for d in /proc/[0-9]*; do
			[[ $(readlink "$d/ns/mnt" 2>/dev/null) == "$vmnt" ]] && users=$((users + 1))
		done
		if ((users == 0)); then
			removed "the VM-only node's mount namespace ($vmnt): no process is left in it"
		else
			fail "$users process(es) still in the VM-only node's mount namespace $vmnt"
		fi
	fi
	# The node's mount namespace ends with its last process, and with it
	# every mount the kubelet, containerd and CNI made in it.
	if [[ -n $mnt ]]; then
		nmounts=$(wc -l <"/proc/$hpid/mountinfo")
		stop holder 5 || fail "the namespace holder (pid $hpid) still runs"
		users=0
		for d in /proc/[0-9]*; do
			[[ $(readlink "$d/ns/mnt" 2>/dev/null) == "$mnt" ]] && users=$((users + 1))
		done
		if ((users == 0)); then
			removed "the node's mount namespace ($mnt, $nmounts mounts): no process is left in it"
		else
			fail "$users process(es) still in the node's mount namespace $mnt"
		fi
	fi
fi

# --- 2. Processes no record names: then nothing is removed --------------

# They may be a running cluster whose record was lost, or one an older
# local-up started: removing its namespace, cgroups or files under it would
# break it, and killing it by anything but a record is not ours to do.
mapfile -t strays < <(unrecorded)
if ((${#strays[@]})); then
	fail "processes of $NAME that no record names (not killed; stop them, then run hack/local-down.sh again):"
	printf '    %s\n' "${strays[@]}" >&2
	log "nothing else removed while they run"
	exit 1
fi

# --- 3. The host objects the record names, newest first -----------------

# remove_netns FILE: the network namespace mounted at FILE, or the file a
# reboot left (when /run is on disk) without its namespace.
remove_netns() {
	local f=$1 n=${1##*/} veths pids
	[[ -e $f || -L $f ]] || return 0
	if is_mountpoint "$f"; then
		pids=$(unrecorded | awk -v l="in network namespace $n" 'index($0, l) { print $1 }' | tr '\n' ' ')
		if [[ -n $pids ]]; then
			fail "network namespace $n: processes not in the record still use it (pids ${pids% }): not removed"
			return
		fi
		veths=$(ip -n "$n" -o link show type veth 2>/dev/null | awk -F': ' '{ sub(/@.*/, "", $2); print $2 }' | sort | tr '\n' ' ')
		ip netns delete "$n" 2>/dev/null || { umount "$f" 2>/dev/null && rm -f "$f"; }
		if [[ -e $f ]] || is_mountpoint "$f"; then
			fail "network namespace $n: $f is still there"
		else
			removed "network namespace $n${veths:+ (and its veths ${veths% })}"
		fi
	else
		rm -f "$f"
		if [[ -e $f ]]; then fail "could not remove $f"; else removed "$f (a file without a namespace, left by a reboot)"; fi
	fi
}

# remove_cgroup DIR: a cgroup and every cgroup below it, deepest first; the
# kernel may count exiting tasks for a moment.
remove_cgroup() {
	local top=$1 d i n tasks
	[[ -d $top ]] || return 0
	n=$(find "$top" -type d | wc -l)
	for ((i = 0; i < 50; i++)); do
		tasks=$(find "$top" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -un | tr '\n' ' ')
		[[ -z $tasks ]] && break
		sleep 0.1
	done
	if [[ -n $tasks ]]; then
		fail "cgroup $top still has tasks (${tasks% }): not removed"
		return
	fi
	while read -r d; do
		for ((i = 0; i < 50; i++)); do
			if rmdir "$d" 2>/dev/null || [[ ! -d $d ]]; then break; fi
			sleep 0.1
		done
	done < <(find "$top" -depth -type d)
	if [[ -d $top ]]; then
		fail "cgroup $top: $(find "$top" -type d | wc -l) of $n cgroup(s) left"
	else
		removed "cgroup $top ($n cgroup(s))"
	fi
}

undo() {
	local kind=$1 a=$2 b=${3:-}
	case $kind in
	netns) remove_netns "/run/netns/$a" ;;
	cgroup) remove_cgroup "$a" ;;
	mountpoint)
		[[ -d $a ]] || return 0
		if is_mountpoint "$a"; then
			fail "$a (made for a bind mount in the node) is mounted on the host: left"
		elif rmdir "$a" 2>/dev/null; then
			removed "directory $a (made for a bind mount in the node)"
		else
			fail "$a (made for a bind mount in the node) is not empty: left"
		fi
		;;
	sysctl)
		# A reboot restored it already.
		((live)) || return 0
		[[ $(sysctl -n "$a" 2>/dev/null) == "$b" ]] && return 0
		if sysctl -q -w "$a=$b" && [[ $(sysctl -n "$a") == "$b" ]]; then
			removed "the kubelet's change of $a (back to $b)"
		else
			fail "could not restore $a=$b"
		fi
		;;
	esac
}
if ((have_record)); then
	while read -r kind a b; do
		[[ -n $kind ]] && undo "$kind" "$a" "$b"
	done < <(tac "$STATE/made")
fi

# --- 4. The sweep: what an earlier run left, with or without a record ----

# Host mounts of the cluster's dirs (the node's went with its namespace;
# these reach the host only by mistake, or from an older local-up).
while read -r mp; do
	[[ -n $mp ]] || continue
	if umount "$mp" 2>/dev/null; then
		:
	elif umount -l "$mp" 2>/dev/null; then
		log "warning: $mp was busy: detached lazily"
	fi
	if is_mountpoint "$mp"; then fail "could not unmount $mp"; else removed "mount $mp"; fi
done < <(mounts_under "$STATE" "$RUN" "$LEGACY")

# Loop devices bound to the images in $STATE/disks: the nodes' state
# roots' (local-up's state_fs) clear themselves when the namespace that
# mounted them ends, and one still bound is a mount that outlived it; the
# block PersistentVolumes' are detached here. Before one, the loop devices
# on top of it: the kubelet's, over a PV it mapped for a pod (it detaches
# its own when it unmaps; not when it was stopped first).
detach_loop() {
	local dev=$1 backing=$2
	if losetup -d "$dev" 2>/dev/null && ! losetup -j "$backing" | grep -q "^$dev:"; then
		removed "loop device $dev of $backing"
	else
		fail "loop device $dev of $backing is still bound (mounted somewhere?)"
	fi
}
for img in "$STATE"/disks/*.img; do
	[[ -f $img ]] || continue
	while read -r dev; do
		[[ -n $dev ]] || continue
		while read -r top; do
			[[ -n $top ]] && detach_loop "$top" "$dev"
		done < <(losetup -j "$dev" 2>/dev/null | cut -d: -f1)
		detach_loop "$dev" "$img"
	done < <(losetup -j "$img" 2>/dev/null | cut -d: -f1)
done

remove_netns "$NETNS"
remove_netns "$VM_NETNS"

while read -r mp; do
	remove_cgroup "$mp/$NAME"
done < <(cgroup_mounts)

# Files: the record goes last, and only when everything else is gone, so
# that a later run still knows what to look for.
dirs=("$RUN" "$OUT")
[[ -n $LEGACY ]] && dirs+=("$LEGACY")
((failed)) || dirs+=("$STATE")
for d in "${dirs[@]}"; do
	[[ -e $d ]] || continue
	rm -rf "$d" 2>/dev/null
	if [[ -e $d ]]; then fail "could not remove $d"; else removed "$d"; fi
done

if ((failed)); then
	if [[ -e $STATE ]]; then
		log "local-down could not remove everything (errors above); the record stays in $STATE"
	else
		log "local-down could not remove everything (errors above)"
	fi
	exit 1
fi
if ((found)); then log "local cluster removed"; else log "no local cluster and nothing left of one"; fi
