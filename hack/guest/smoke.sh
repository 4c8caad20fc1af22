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
#   --share          virtio-fs shares as the runtime gives them (run as root):
#                    q35 with shared memory, a virtiofsd per share, and a
#                    NoCloud seed ISO whose vmpod-shares lists them: a rw
#                    share, a ro share below it at a path with a space, and a
#                    tag with no device behind it, which must fail without
#                    stopping the boot
#   --log=FILE       keep the serial console log in FILE
# SMOKE_TIMEOUT (default 60) bounds each wait, in seconds.
# Needs: qemu-system-x86, qemu-utils, socat; for --share also xorriso and
# virtiofsd (qemu-system-common).
set -euo pipefail

kernel=vmlinux bios=() nic=none keeplog= share=
while (($#)); do
	case $1 in
	--vmlinuz) kernel=vmlinuz ;;
	--qboot) bios=(-bios /usr/share/qemu/qboot.rom) ;;
	--nic=none | --nic=isolated | --nic=dhcp) nic=${1#--nic=} ;;
	--log=?*) keeplog=${1#--log=} ;;
	--share) share=1 ;;
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
virtiofsd=/usr/lib/qemu/virtiofsd
needs=(qemu-system-x86_64 qemu-img socat)
[[ -n $share ]] && needs+=(xorriso "$virtiofsd")
for c in "${needs[@]}"; do
	command -v "$c" >/dev/null || { echo "smoke: $c not found (run hack/install-deps.sh)" >&2 && exit 1; }
done
# virtiofsd's namespace sandbox needs root.
[[ -z $share || $EUID -eq 0 ]] || { echo "smoke: --share must run as root" >&2 && exit 1; }

tmp=$(mktemp -d)
log=$tmp/console.log
qpid=
fspids=()
cleanup() {
	local rc=$? p
	for p in $qpid "${fspids[@]}"; do
		if kill -0 "$p" 2>/dev/null; then
			kill "$p" 2>/dev/null || true
			wait "$p" 2>/dev/null || true
		fi
	done
	if ((rc != 0)); then
		echo "smoke: FAILED" >&2
		[[ -s $tmp/qemu.out ]] && { echo "smoke: QEMU said:" && cat "$tmp/qemu.out"; } >&2
		for p in "$tmp"/virtiofsd-*.out; do
			[[ -s $p ]] && { echo "smoke: $(basename "$p" .out) said:" && tail -n 20 "$p"; } >&2
		done
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

machine=() memargs=(-m 256) shareargs=()
if [[ -n $share ]]; then
	# vhost-user needs the guest's RAM in shared memory, as the runtime's
	# domains have it.
	machine=(-machine q35,memory-backend=mem)
	memargs=(-m 256 -object memory-backend-memfd,id=mem,size=256M,share=on)
	mkdir -p "$tmp/data" "$tmp/config" "$tmp/seed"
	echo "from the host" >"$tmp/data/host.txt"
	echo "read-only" >"$tmp/config/setting"
	# Parents first, as the runtime writes it. The ro share's mount point
	# is made by the guest's mkdir -p inside the rw share, so it shows up
	# on the host: a write through virtio-fs. "missing" has no device.
	printf '%s\n' 'vmpod:data_0123abcd rw /srv/data' \
		'vmpod:config_89abcdef ro /srv/data/a\040b' \
		'vmpod:missing_00000000 rw /srv/missing' >"$tmp/seed/vmpod-shares"
	# Rock Ridge and Joliet, like the runtime's seed (pkg/vm/cloudinit.go).
	xorriso -as mkisofs -quiet -V cidata -r -J -o "$tmp/seed.iso" "$tmp/seed" 2>"$tmp/xorriso.out" ||
		{ cat "$tmp/xorriso.out" >&2 && exit 1; }
	for fs in data config; do
		"$virtiofsd" -f --socket-path="$tmp/$fs.sock" -o source="$tmp/$fs" -o cache=auto \
			-o sandbox=namespace </dev/null >"$tmp/virtiofsd-$fs.out" 2>&1 &
		fspids+=($!)
	done
	deadline=$((SECONDS + 10))
	for fs in data config; do
		until [[ -S $tmp/$fs.sock ]]; do
			((SECONDS < deadline)) || { echo "smoke: no virtiofsd socket $fs.sock after 10 s" >&2 && exit 1; }
			sleep 0.05
		done
	done
	shareargs=(
		-chardev socket,id=fs0,path="$tmp/data.sock" -device vhost-user-fs-pci,chardev=fs0,tag=vmpod:data_0123abcd
		-chardev socket,id=fs1,path="$tmp/config.sock" -device vhost-user-fs-pci,chardev=fs1,tag=vmpod:config_89abcdef
		-drive file="$tmp/seed.iso",if=none,id=ci,format=raw,readonly=on -device virtio-blk-pci,drive=ci,serial=cidata
	)
fi

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

echo "smoke: booting $kernel${bios:+ with qboot}, nic=$nic${share:+, shares}" >&2
start=$(now)
qemu-system-x86_64 -accel tcg "${machine[@]}" "${memargs[@]}" -smp 2 -nographic -monitor none -no-reboot \
	"${bios[@]}" \
	-kernel "$out/$kernel" -initrd "$out/initrd.img" -append 'console=ttyS0 panic=-1' \
	-drive file="$tmp/disk.qcow2",if=virtio \
	"${netargs[@]}" "${shareargs[@]}" \
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

if [[ -n $share ]]; then
	for m in 'share /srv/data ok' 'share /srv/data/a\\040b ok' 'share /srv/missing failed: '; do
		grep -q "VMPOD-GUEST: $m" "$log" || { echo "smoke: no '$m'" >&2 && exit 1; }
	done
	[[ -d "$tmp/data/a b" ]] || { echo "smoke: the guest's mkdir of '/srv/data/a b' did not reach the host" >&2 && exit 1; }
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
echo "smoke: OK $kernel${bios:+ +qboot} nic=$nic${share:+ +shares}: init ${t_init}s ready ${t_ready}s poweroff ${t_off}s"
