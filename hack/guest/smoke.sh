#!/usr/bin/env bash
# Boots the test guest built by build.sh with plain QEMU under TCG (no
# libvirt), waits for "VMPOD-GUEST: ready", presses the ACPI power button
# over QMP and checks that the guest powers itself off.
#
# Usage: hack/guest/smoke.sh [options] OUTDIR
#   --vmlinuz        boot the bzImage instead of the uncompressed vmlinux
#   --qboot          use qboot instead of SeaBIOS as firmware
#   --nic=none       no network card (default)
#   --nic=isolated   a virtio NIC on a hub with nothing else on it, so DHCP
#                    must fail (and must not hang the boot)
#   --nic=dhcp       a virtio NIC on QEMU user networking with restrict=on (the
#                    guest can reach neither the host nor anything else; slirp
#                    only answers DHCP), and 127.0.0.1:PORT forwarded to the
#                    guest's port 8080 to check the HTTP server
#   --log=FILE       keep the serial console log in FILE
# SMOKE_TIMEOUT (default 60) bounds each wait, in seconds.
# Needs: qemu-system-x86, qemu-utils, socat.
set -euo pipefail

kernel=vmlinux bios=() nic=none keeplog=
while (($#)); do
	case $1 in
	--vmlinuz) kernel=vmlinuz ;;
	--qboot) bios=(-bios /usr/share/qemu/qboot.rom) ;;
	--nic=none | --nic=isolated | --nic=dhcp) nic=${1#--nic=} ;;
	--log=?*) keeplog=${1#--log=} ;;
	-*) echo "smoke: unknown option $1" >&2 && exit 2 ;;
	*) break ;;
	esac
	shift
done
(($# == 1)) || {
	sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
	exit 2
}
out=$1
for f in "$out/$kernel" "$out/initrd.img" "$out/disk.qcow2"; do
	[[ -f $f ]] || { echo "smoke: missing $f (run hack/guest/build.sh)" >&2 && exit 1; }
done
for c in qemu-system-x86_64 qemu-img socat; do
	command -v "$c" >/dev/null || { echo "smoke: $c not found (run hack/install-deps.sh)" >&2 && exit 1; }
done

tmp=$(mktemp -d)
log=$tmp/console.log
qpid=
cleanup() {
	local rc=$?
	if [[ -n $qpid ]] && kill -0 "$qpid" 2>/dev/null; then
		kill "$qpid" 2>/dev/null || true
		wait "$qpid" 2>/dev/null || true
	fi
	if ((rc != 0)); then
		echo "smoke: FAILED" >&2
		[[ -s $tmp/qemu.out ]] && { echo "smoke: QEMU said:" && cat "$tmp/qemu.out"; } >&2
		[[ -s $log ]] && { echo "smoke: last console lines:" && tail -n 40 "$log"; } >&2
	fi
	[[ -n $keeplog && -f $log ]] && cp "$log" "$keeplog"
	rm -rf "$tmp"
}
trap cleanup EXIT

# The guest writes to an overlay; disk.qcow2 stays pristine.
qemu-img create -q -f qcow2 -F qcow2 -b "$(realpath "$out/disk.qcow2")" "$tmp/disk.qcow2"

netargs=(-nic none)
port=
case $nic in
isolated) netargs=(-netdev "hubport,id=n0,hubid=0" -device "virtio-net-pci,netdev=n0") ;;
dhcp)
	port=$((20000 + RANDOM % 20000))
	netargs=(-netdev "user,id=n0,restrict=on,hostfwd=tcp:127.0.0.1:$port-:8080"
		-device "virtio-net-pci,netdev=n0")
	;;
esac

now() { echo "${EPOCHREALTIME/,/.}"; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }
# wait_for PATTERN SECONDS: poll the console log while QEMU runs.
wait_for() {
	local deadline=$((SECONDS + $2)) rc=0
	until grep -q "$1" "$log" 2>/dev/null; do
		if ! kill -0 "$qpid" 2>/dev/null; then
			wait "$qpid" || rc=$?
			qpid=
			echo "smoke: QEMU exited ($rc) before '$1'" >&2
			return 1
		fi
		((SECONDS < deadline)) || { echo "smoke: no '$1' after $2 s" >&2 && return 1; }
		sleep 0.05
	done
}

echo "smoke: booting $kernel${bios:+ with qboot}, nic=$nic" >&2
start=$(now)
qemu-system-x86_64 -accel tcg -m 256 -smp 2 -nographic -monitor none -no-reboot \
	"${bios[@]}" \
	-kernel "$out/$kernel" -initrd "$out/initrd.img" -append 'console=ttyS0 panic=-1' \
	-drive file="$tmp/disk.qcow2",if=virtio \
	"${netargs[@]}" \
	-qmp unix:"$tmp/qmp.sock",server=on,wait=off \
	-serial file:"$log" </dev/null >"$tmp/qemu.out" 2>&1 &
qpid=$!

limit=${SMOKE_TIMEOUT:-60}
wait_for 'VMPOD-GUEST: init' "$limit"
t_init=$(since "$start")
wait_for 'VMPOD-GUEST: ready' "$limit"
t_ready=$(since "$start")
grep -q 'VMPOD-GUEST: disk hello from the vmpod disk' "$log" || { echo "smoke: disk marker missing" >&2 && exit 1; }

if [[ $nic == dhcp ]]; then
	grep -q 'VMPOD-GUEST: ip ' "$log" || { echo "smoke: no DHCP address" >&2 && exit 1; }
	# bash's /dev/tcp to the loopback forward: no client package needed.
	exec 3<>"/dev/tcp/127.0.0.1/$port"
	printf 'GET / HTTP/1.0\r\n\r\n' >&3
	reply=$(timeout 10 cat <&3 | tr -d '\r') || true
	exec 3>&-
	[[ $reply == "HTTP/1.0 200 OK"*"vmpod-guest "* ]] || { echo "smoke: bad HTTP reply: $reply" >&2 && exit 1; }
	echo "smoke: HTTP: $(tail -n1 <<<"$reply")" >&2
elif [[ $nic == isolated ]]; then
	grep -q 'VMPOD-GUEST: dhcp failed' "$log" || { echo "smoke: expected 'dhcp failed'" >&2 && exit 1; }
fi

# The ACPI power button, as virDomainShutdown sends it.
off=$(now)
qmp=$(printf '%s\n' '{"execute":"qmp_capabilities"}' '{"execute":"system_powerdown"}' |
	socat -t 10 - UNIX-CONNECT:"$tmp/qmp.sock")
[[ $(grep -c '"return"' <<<"$qmp") -eq 2 ]] || { echo "smoke: QMP said: $qmp" >&2 && exit 1; }

deadline=$((SECONDS + limit))
while kill -0 "$qpid" 2>/dev/null; do
	((SECONDS < deadline)) || { echo "smoke: QEMU still running $limit s after system_powerdown" >&2 && exit 1; }
	sleep 0.05
done
rc=0
wait "$qpid" || rc=$?
qpid=
t_off=$(since "$off")
((rc == 0)) || { echo "smoke: QEMU exited with $rc" >&2 && exit 1; }
grep -q 'VMPOD-GUEST: poweroff' "$log" || { echo "smoke: guest did not print poweroff" >&2 && exit 1; }

grep -a 'VMPOD-GUEST:' "$log" | tr -d '\r' >&2
echo "smoke: OK $kernel${bios:+ +qboot} nic=$nic: init ${t_init}s ready ${t_ready}s poweroff ${t_off}s"
