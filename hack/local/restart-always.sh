#!/usr/bin/env bash
# restart-always.sh CMD...: run CMD, and again a second after it ends, as
# systemd's Restart=always does for a node's units (the kubelet,
# containerd, vmpod's node daemon and CRI server), until this script gets
# SIGTERM or SIGINT: it passes the signal to CMD, waits for CMD to end and
# exits with its status. hack/local-up.sh runs the local nodes' kubelets
# and runtimes under it, so a test can kill one (SIGKILL) and find it
# back, as on a real node.
#
# RESTART_ALWAYS_HOLD names a file: while it exists (at most 5 minutes),
# CMD is not started again. test/e2e holds a node's units down with it to
# take the node through a reboot (TestNodeReboot).
set -u
hold=${RESTART_ALWAYS_HOLD:-}
child="" stopping=""
trap 'stopping=1; if [[ -n $child ]]; then kill -TERM "$child" 2>/dev/null; fi' TERM INT
rc=0
while [[ -z $stopping ]]; do
	"$@" &
	child=$!
	if [[ -n $stopping ]]; then kill -TERM "$child" 2>/dev/null; fi
	# A trapped signal ends wait early: wait again until CMD has ended.
	while :; do
		wait "$child"
		rc=$?
		kill -0 "$child" 2>/dev/null || break
	done
	child=""
	[[ -n $stopping ]] && break
	echo "restart-always: $1 exited with status $rc; starting it again in 1s" >&2
	sleep 1
	for ((i = 0; i < 1500; i++)); do
		[[ -n $hold && -e $hold && -z $stopping ]] || break
		((i % 50 == 0)) && echo "restart-always: held by $hold" >&2
		sleep 0.2
	done
done
exit "$rc"
