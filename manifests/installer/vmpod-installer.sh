#!/bin/sh
# vmpod node installer, in the manner of kata-deploy: run by the
# vmpod-installer DaemonSet with the host's root filesystem at $HOST_ROOT,
# it puts vm-runtime and the shim on the host, starts the node daemon
# (vm-runtime daemon, the systemd unit vm-runtime-daemon) that runs the
# node's VMs, puts the vmpod runtime handler into the host's containerd
# (or CRI-O) configuration, and takes all of it out again.
#
#   vmpod-installer.sh install     install (idempotent) and exit
#   vmpod-installer.sh uninstall   remove what install added and exit
#   vmpod-installer.sh run         install (or, with VMPOD_RUN_MODE=uninstall,
#                                  uninstall), then wait; on SIGTERM uninstall
#                                  only if VMPOD_UNINSTALL_ON_STOP is true
#
# Environment (defaults in brackets):
#   HOST_ROOT                 the host's / [/host]
#   VMPOD_BIN                 the vm-runtime binary to install [/usr/local/bin/vm-runtime]
#   VMPOD_JAILER_BIN          vmpod-qemu, QEMU's jailer, installed next to
#                             vm-runtime when it exists (else vm-runtime jails
#                             QEMU itself, about 100 ms slower a VM start)
#                             [/usr/local/bin/vmpod-qemu]
#   VMPOD_SHIM_BIN            the shim binary containerd runs, installed as
#                             containerd-shim-vmpod-v2 when it exists (else that
#                             name links to vm-runtime)
#                             [/usr/local/bin/containerd-shim-vmpod-v2]
#   VMPOD_DIR                 where it goes on the host [/opt/vmpod]
#   CONTAINER_RUNTIME         containerd or crio [containerd]
#   CONTAINERD_CONFIG         containerd's config on the host [/etc/containerd/config.toml]
#   CONTAINERD_VERSION        e.g. 2.1.4; asked of the host's containerd when unset
#   CONTAINERD_BIN_DIR        where the host's containerd binary is, for the
#                             shim's link (below) [asked of the host]
#   CRIO_CONFIG_DIR           CRI-O's drop-in dir on the host [/etc/crio/crio.conf.d]
#   RESTART_CONTAINERD        whether the installer runs systemctl on the host
#                             (through PID 1's mount namespace) at all [systemctl]:
#                             systemctl: install starts (or restarts) the node
#                             daemon's unit and waits for its socket, then
#                             restarts containerd (or crio) when its config
#                             changed; uninstall restarts containerd (or crio)
#                             and stops and disables the daemon.
#                             none: no systemctl; the unit and the config are
#                             written or removed and the log says what to start,
#                             stop or restart by hand
#   VMPOD_DAEMON_UNIT         the node daemon's unit file to install [beside this
#                             script, where the DaemonSet's ConfigMap puts it, else
#                             ../systemd/vm-runtime-daemon.service, as in a checkout]
#   VMPOD_DAEMON_WAIT         seconds install waits for the daemon's socket after
#                             starting it [30]
#   CHECK_HOST                true: refuse to install where QEMU or libvirt's
#                             QEMU driver is missing [true]
#   VMPOD_RUN_MODE            what `run` does before it waits: install or
#                             uninstall [install]
#   VMPOD_UNINSTALL_ON_STOP   true: `run` uninstalls when the pod stops [false]
#
# A pod stops for a DaemonSet rollout, a node drain or a kubelet restart
# as much as for a delete, and cannot tell which: uninstalling then would
# restart containerd and take the runtime from the node's VM pods for
# nothing. So `run` leaves the runtime in place when it stops, and removing
# vmpod from the nodes is a step of its own (docs/install.md): set
# VMPOD_RUN_MODE=uninstall on the DaemonSet, wait for its rollout, then
# delete it.
#
# containerd also gets a link to the shim next to its own binary
# (containerd-shim-vmpod-v2 -> /opt/vmpod/bin/containerd-shim-vmpod-v2):
# when containerd 2.x starts a pod's container task in the shim of the
# pod's sandbox, the task's bundle records the runtime's name only, not
# runtime_path, and after a restart containerd looks that name up on its
# PATH and next to its own binary. Without the link it finds no shim for
# the VM's task, takes the VM for gone and the kubelet starts the
# container again. Uninstall removes the link (only the installer's).
#
# The node daemon: every VM of the node runs under `vm-runtime daemon`
# (manifests/systemd/vm-runtime-daemon.service, which the DaemonSet's
# ConfigMap carries beside this script, so the unit has one source), and
# the shim dials it on /run/vmpod/vmd.sock (the unit's --socket). Install
# writes the unit to /etc/systemd/system/vm-runtime-daemon.service (its
# ExecStart's /opt/vmpod moved to VMPOD_DIR), then
# (RESTART_CONTAINERD=systemctl) daemon-reload, enable, and restart it when
# vm-runtime or the unit changed since the installer last started it (or it
# is not active), and waits (VMPOD_DAEMON_WAIT, 30 s) for its socket, all
# before containerd restarts: a shim must find it. Restarting it leaves the
# VMs running (the daemon adopts them; KillMode=process). A unit of that
# name the installer did not write stops the install. Uninstall stops and
# disables the installer's unit and removes it.
#
# The runtime goes into containerd's config as one block between marker
# lines, in the layout of the file's `version`: version 2 (containerd 1.7,
# and 2.x reading an old file) or version 3+ (containerd 2.x). Uninstall
# deletes exactly those lines, so the file is as it was. For CRI-O the
# runtime is a drop-in file of its own (runtime_type "vm"), removed on
# uninstall.
set -eu

HOST_ROOT=${HOST_ROOT:-/host}
VMPOD_BIN=${VMPOD_BIN:-/usr/local/bin/vm-runtime}
VMPOD_JAILER_BIN=${VMPOD_JAILER_BIN:-/usr/local/bin/vmpod-qemu}
VMPOD_SHIM_BIN=${VMPOD_SHIM_BIN:-/usr/local/bin/containerd-shim-vmpod-v2}
VMPOD_DIR=${VMPOD_DIR:-/opt/vmpod}
CONTAINER_RUNTIME=${CONTAINER_RUNTIME:-containerd}
CONTAINERD_CONFIG=${CONTAINERD_CONFIG:-/etc/containerd/config.toml}
CRIO_CONFIG_DIR=${CRIO_CONFIG_DIR:-/etc/crio/crio.conf.d}
RESTART_CONTAINERD=${RESTART_CONTAINERD:-systemctl}
CHECK_HOST=${CHECK_HOST:-true}
VMPOD_RUN_MODE=${VMPOD_RUN_MODE:-install}
VMPOD_UNINSTALL_ON_STOP=${VMPOD_UNINSTALL_ON_STOP:-false}
VMPOD_DAEMON_WAIT=${VMPOD_DAEMON_WAIT:-30}
if [ -z "${VMPOD_DAEMON_UNIT:-}" ]; then
	VMPOD_DAEMON_UNIT=$(dirname "$0")/vm-runtime-daemon.service
	[ -f "$VMPOD_DAEMON_UNIT" ] || VMPOD_DAEMON_UNIT=$(dirname "$0")/../systemd/vm-runtime-daemon.service
fi

BEGIN='# BEGIN vmpod runtime (added by the vmpod installer; removed on uninstall)'
END='# END vmpod runtime'
SHIM=containerd-shim-vmpod-v2
DAEMON=vm-runtime-daemon

log() { echo "vmpod-installer: $*" >&2; }
die() {
	log "error: $*"
	exit 1
}

host() { echo "$HOST_ROOT$1"; }
config=$(host "$CONTAINERD_CONFIG")
# Marks a config file the installer created, so uninstall removes it.
created_mark=$(host "$VMPOD_DIR/.created-containerd-config")
crio_dropin=$(host "$CRIO_CONFIG_DIR/50-vmpod.conf")
case $CONTAINER_RUNTIME in
containerd | crio) ;;
*) die "CONTAINER_RUNTIME=$CONTAINER_RUNTIME: want containerd or crio" ;;
esac
case $RESTART_CONTAINERD in
systemctl | none) ;;
*) die "RESTART_CONTAINERD=$RESTART_CONTAINERD: want systemctl or none" ;;
esac
case $VMPOD_DAEMON_WAIT in
'' | *[!0-9]*) die "VMPOD_DAEMON_WAIT=$VMPOD_DAEMON_WAIT: want a number of seconds" ;;
esac

# on_host CMD...: run a host command in the host's mount namespace (the
# pod has hostPID), so it sees the host's binaries, libraries and systemd.
on_host() { nsenter --target 1 --mount -- "$@"; }

containerd_major() {
	v=${CONTAINERD_VERSION:-}
	if [ -z "$v" ]; then
		# "containerd github.com/containerd/containerd/v2 v2.1.4 <commit>"
		v=$(on_host containerd --version | awk '{print $3}') ||
			die "cannot run containerd --version on the host; set CONTAINERD_VERSION"
	fi
	v=${v#v}
	echo "${v%%.*}"
}

# config_version: the `version = N` of the config file (1 when absent, as
# containerd reads it).
config_version() {
	v=$(sed -n 's/^[[:space:]]*version[[:space:]]*=[[:space:]]*\([0-9][0-9]*\).*/\1/p' "$config" | head -n 1)
	echo "${v:-1}"
}

runtime_block() {
	case $1 in
	2) table='[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.vmpod]' ;;
	*) table="[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.vmpod]" ;;
	esac
	cat <<EOF
$BEGIN
$table
  runtime_type = "io.containerd.vmpod.v2"
  runtime_path = "$VMPOD_DIR/bin/$SHIM"
  # vmpod reads the VM's settings from the pod's vmpod.io/ annotations.
  pod_annotations = ["vmpod.io/*"]
$END
EOF
}

# check_markers: refuse a containerd config whose marker lines do not make
# exactly one whole block (or none). without_block's sed range deletes from
# a BEGIN to the next END, or to the end of the file when there is none:
# with a lone BEGIN it would cut the rest of the config away.
check_markers() {
	[ -f "$config" ] || return 0
	begins=$(grep -c -x -F -e "$BEGIN" "$config" || true)
	ends=$(grep -c -x -F -e "$END" "$config" || true)
	problem=
	if [ "$begins" -gt 1 ] || [ "$ends" -gt 1 ]; then
		problem="it has $begins BEGIN and $ends END vmpod marker lines, want one block at most"
	elif [ "$begins" -ne "$ends" ]; then
		if [ "$begins" -eq 1 ]; then
			problem="it has the BEGIN vmpod marker line without its END line"
		else
			problem="it has the END vmpod marker line without its BEGIN line"
		fi
	elif [ "$begins" -eq 1 ]; then
		b=$(grep -n -x -F -e "$BEGIN" "$config" | cut -d: -f1)
		e=$(grep -n -x -F -e "$END" "$config" | cut -d: -f1)
		[ "$b" -lt "$e" ] || problem="its END vmpod marker line (line $e) comes before its BEGIN line (line $b)"
	fi
	[ -z "$problem" ] ||
		die "$CONTAINERD_CONFIG: $problem; not editing it. Fix the file by hand: the installer's block is the lines from '$BEGIN' to '$END'"
}

# without_block FILE: FILE's content without the installer's block
# (check_markers first).
without_block() { sed "\\|^$BEGIN\$|,\\|^$END\$|d" "$1"; }

# write_config CONTENT-FILE: replace the config atomically (same directory).
write_config() {
	tmp="$config.vmpod-tmp"
	cat "$1" >"$tmp"
	if [ -f "$config" ]; then chmod --reference="$config" "$tmp" 2>/dev/null || true; fi
	mv "$tmp" "$config"
}

check_host() {
	[ "$CHECK_HOST" = true ] || return 0
	on_host sh -c 'command -v qemu-system-x86_64' >/dev/null ||
		die "no qemu-system-x86_64 on this node: install QEMU (Debian/Ubuntu: apt-get install qemu-system-x86)"
	on_host sh -c 'ls /usr/lib*/libvirt/connection-driver/libvirt_driver_qemu.so /usr/lib*/*/libvirt/connection-driver/libvirt_driver_qemu.so 2>/dev/null | grep -q .' ||
		die "no libvirt QEMU driver on this node: install it (Debian/Ubuntu: apt-get install libvirt-daemon-driver-qemu)"
}

install_shim() {
	bindir=$(host "$VMPOD_DIR/bin")
	mkdir -p "$bindir"
	# Copy then rename: a running shim or daemon keeps its old inode. The
	# same binary is left as it is.
	if ! cmp -s "$VMPOD_BIN" "$bindir/vm-runtime"; then
		cp "$VMPOD_BIN" "$bindir/.vm-runtime.tmp"
		chmod 0755 "$bindir/.vm-runtime.tmp"
		mv "$bindir/.vm-runtime.tmp" "$bindir/vm-runtime"
	fi
	if [ -f "$VMPOD_JAILER_BIN" ]; then
		# QEMU's jailer (cmd/vmpod-qemu), which vm-runtime links as its
		# domains' emulator when it finds it next to itself.
		if ! cmp -s "$VMPOD_JAILER_BIN" "$bindir/vmpod-qemu"; then
			cp "$VMPOD_JAILER_BIN" "$bindir/.vmpod-qemu.tmp"
			chmod 0755 "$bindir/.vmpod-qemu.tmp"
			mv "$bindir/.vmpod-qemu.tmp" "$bindir/vmpod-qemu"
		fi
	else
		rm -f "$bindir/vmpod-qemu"
	fi
	if [ -f "$VMPOD_SHIM_BIN" ]; then
		# The shim alone (cmd/containerd-shim-vmpod-v2): one process per
		# VM pod, without libvirt; the node daemon runs its VM
		# (docs/shim-memory.md).
		cp "$VMPOD_SHIM_BIN" "$bindir/.$SHIM.tmp"
		chmod 0755 "$bindir/.$SHIM.tmp"
		mv -T "$bindir/.$SHIM.tmp" "$bindir/$SHIM"
	else
		ln -sfn vm-runtime "$bindir/$SHIM"
	fi
	log "installed $VMPOD_DIR/bin/vm-runtime, $SHIM$( [ -f "$VMPOD_JAILER_BIN" ] && echo " and vmpod-qemu")"
}

# The node daemon's unit (see the top). The installer records that it
# wrote the unit, so uninstall removes only its own; and the checksum of
# vm-runtime and the unit it last (re)started the daemon with, so a re-run
# with neither changed leaves the daemon (and its VMs' adoption) alone.
unit_path=/etc/systemd/system/$DAEMON.service
unit=$(host "$unit_path")
unit_wants=$(host "/etc/systemd/system/multi-user.target.wants/$DAEMON.service")
unit_record=$(host "$VMPOD_DIR/.daemon-unit")
daemon_started=$(host "$VMPOD_DIR/.daemon-started")

# daemon_socket: the installed unit's --socket, which is the shim's
# default ($VMPOD_NODE_SOCKET unset) too.
daemon_socket() {
	s=$(sed -n '/^[[:space:]]*#/!s/.*--socket[[:space:]]\{1,\}\([^[:space:]\\]*\).*/\1/p' "$unit" | head -n 1)
	echo "${s:-/run/vmpod/vmd.sock}"
}

install_unit() {
	[ -f "$VMPOD_DAEMON_UNIT" ] ||
		die "no $VMPOD_DAEMON_UNIT: the node daemon's unit (manifests/systemd/vm-runtime-daemon.service) goes beside this script; set VMPOD_DAEMON_UNIT to it"
	new=$(mktemp)
	# The unit as it is, but for where VMPOD_DIR puts vm-runtime.
	sed "s|^ExecStart=/opt/vmpod/bin/|ExecStart=$VMPOD_DIR/bin/|" "$VMPOD_DAEMON_UNIT" >"$new"
	if [ -f "$unit" ] && cmp -s "$new" "$unit"; then
		rm -f "$new"
		if [ -f "$unit_record" ]; then
			log "$unit_path is up to date"
		else
			log "$unit_path is in place and not the installer's: uninstall leaves it"
		fi
		return 0
	fi
	if { [ -e "$unit" ] || [ -L "$unit" ]; } && [ ! -f "$unit_record" ]; then
		rm -f "$new"
		die "$unit_path exists and is not the installer's; remove it first (change the daemon's flags with a drop-in: systemctl edit $DAEMON)"
	fi
	mkdir -p "$(dirname "$unit")" "$(dirname "$unit_record")"
	cp "$new" "$unit.vmpod-tmp"
	rm -f "$new"
	chmod 0644 "$unit.vmpod-tmp"
	mv "$unit.vmpod-tmp" "$unit"
	: >"$unit_record"
	log "wrote $unit_path"
}

# start_daemon: (re)start the daemon when vm-runtime or its unit changed
# since the installer last started it, or it is not active; then wait for
# its socket. Before containerd restarts: the shims dial it.
start_daemon() {
	case $RESTART_CONTAINERD in
	none)
		log "$DAEMON not started (RESTART_CONTAINERD=none): start it before $CONTAINER_RUNTIME runs VM pods: systemctl daemon-reload && systemctl enable $DAEMON && systemctl restart $DAEMON"
		return 0
		;;
	esac
	sock=$(daemon_socket)
	# The jailer too: vm-runtime links the one it finds when it starts.
	sum=$(cat "$(host "$VMPOD_DIR/bin/vm-runtime")" "$unit" $(ls "$(host "$VMPOD_DIR/bin/vmpod-qemu")" 2>/dev/null) | cksum)
	if [ -f "$daemon_started" ] && [ "$(cat "$daemon_started")" = "$sum" ] &&
		on_host systemctl is-active --quiet "$DAEMON"; then
		log "$DAEMON already runs this vm-runtime and unit"
	else
		rm -f "$daemon_started"
		on_host systemctl daemon-reload || die "systemctl daemon-reload failed"
		on_host systemctl enable --quiet "$DAEMON" || die "systemctl enable $DAEMON failed"
		# A socket left by a daemon that was killed would pass the wait
		# below before the new one listens.
		rm -f "$(host "$sock")"
		log "(re)starting $DAEMON (running VMs keep running: it adopts them)"
		on_host systemctl restart "$DAEMON" ||
			die "systemctl restart $DAEMON failed; see journalctl -u $DAEMON"
	fi
	i=0
	until [ -S "$(host "$sock")" ]; do
		if [ "$i" -ge "$VMPOD_DAEMON_WAIT" ]; then
			state=$(on_host systemctl is-active "$DAEMON" || true)
			die "$DAEMON ($state) made no socket $sock in ${VMPOD_DAEMON_WAIT}s; see journalctl -u $DAEMON"
		fi
		sleep 1
		i=$((i + 1))
	done
	echo "$sum" >"$daemon_started"
	log "$DAEMON serves $sock"
}

# uninstall_daemon: stop, disable and remove the installer's unit (a unit
# it did not write stays, running).
uninstall_daemon() {
	rm -f "$daemon_started"
	[ -f "$unit_record" ] || return 0
	if [ "$RESTART_CONTAINERD" = systemctl ]; then
		# The VMs it runs keep running (KillMode=process); their pods are
		# gone by now (docs/install.md).
		on_host systemctl disable --now --quiet "$DAEMON" ||
			log "warning: systemctl disable --now $DAEMON failed; see journalctl -u $DAEMON"
	else
		log "$DAEMON not stopped (RESTART_CONTAINERD=none): if it runs, stop it: systemctl stop $DAEMON && systemctl daemon-reload"
	fi
	if [ -L "$unit_wants" ] && [ "$(readlink "$unit_wants")" = "$unit_path" ]; then rm -f "$unit_wants"; fi
	rm -f "$unit" "$unit.vmpod-tmp" "$unit_record"
	if [ "$RESTART_CONTAINERD" = systemctl ]; then
		on_host systemctl daemon-reload || log "warning: systemctl daemon-reload failed"
	fi
	log "removed $unit_path"
}

# The link to the shim next to containerd's binary (see the top), and
# where install records it for uninstall.
shim_link_record=$(host "$VMPOD_DIR/.containerd-shim-link")
link_shim() {
	dir=${CONTAINERD_BIN_DIR:-}
	if [ -z "$dir" ]; then
		bin=$(on_host sh -c 'command -v containerd') ||
			die "no containerd on the host's PATH; set CONTAINERD_BIN_DIR to the directory of its binary"
		dir=$(dirname "$bin")
	fi
	link=$(host "$dir/$SHIM")
	target=$VMPOD_DIR/bin/$SHIM
	if [ -L "$link" ] && [ "$(readlink "$link")" = "$target" ]; then
		echo "$dir/$SHIM" >"$shim_link_record"
		return 0
	fi
	if [ -e "$link" ] || [ -L "$link" ]; then
		die "$dir/$SHIM exists and is not the installer's link to $target; remove it first (containerd would run it for vmpod pods)"
	fi
	ln -s "$target" "$link" ||
		die "cannot link $dir/$SHIM to $target (containerd finds a VM's task again after a restart only through it); set CONTAINERD_BIN_DIR to a writable directory on containerd's PATH"
	echo "$dir/$SHIM" >"$shim_link_record"
	log "linked $dir/$SHIM -> $target"
}

unlink_shim() {
	[ -f "$shim_link_record" ] || return 0
	link=$(host "$(cat "$shim_link_record")")
	if [ -L "$link" ] && [ "$(readlink "$link")" = "$VMPOD_DIR/bin/$SHIM" ]; then
		rm -f "$link"
	fi
	rm -f "$shim_link_record"
}

# configure: add the runtime block; sets changed=true when the file changed.
configure() {
	check_markers
	mkdir -p "$(dirname "$config")"
	new=$(mktemp)
	if [ -f "$config" ]; then
		without_block "$config" >"$new"
		if grep -q 'containerd\.runtimes\.vmpod\]' "$new"; then
			rm -f "$new"
			die "$CONTAINERD_CONFIG already defines a vmpod runtime outside the installer's block; remove it first"
		fi
		version=$(config_version)
	else
		# No file: containerd runs on defaults. Write the layout it reads.
		major=$(containerd_major)
		if [ "$major" -ge 2 ]; then version=3; else version=2; fi
		echo "version = $version" >"$new"
		mkdir -p "$(dirname "$created_mark")"
		: >"$created_mark"
	fi
	[ "$version" -ge 2 ] || die "$CONTAINERD_CONFIG has config version $version; vmpod needs version 2 or later (containerd 1.7+)"
	runtime_block "$version" >>"$new"
	if [ -f "$config" ] && cmp -s "$new" "$config"; then
		rm -f "$new"
		log "$CONTAINERD_CONFIG already has the vmpod runtime"
		return 0
	fi
	write_config "$new"
	rm -f "$new"
	log "added the vmpod runtime to $CONTAINERD_CONFIG (config version $version)"
	changed=true
}

# crio_block: CRI-O's runtime handler. runtime_type "vm" makes CRI-O start
# the shim as containerd 1.7 does and speak task API v2 to it. CRI-O puts
# every pod annotation into the sandbox's spec, so vmpod.io/ needs no
# allowed_annotations entry (that list only gates CRI-O's own annotations).
crio_block() {
	cat <<EOF
$BEGIN
[crio.runtime.runtimes.vmpod]
  runtime_path = "$VMPOD_DIR/bin/$SHIM"
  runtime_type = "vm"
  # CRI-O keeps the task stdio FIFOs under <runtime_root>/crio/fifo.
  runtime_root = "/run/vmpod/crio"
$END
EOF
}

# configure_crio: write the drop-in; sets changed=true when it changed.
configure_crio() {
	new=$(mktemp)
	crio_block >"$new"
	if [ -f "$crio_dropin" ] && cmp -s "$new" "$crio_dropin"; then
		rm -f "$new"
		log "$CRIO_CONFIG_DIR/50-vmpod.conf already has the vmpod runtime"
		return 0
	fi
	for f in "$(host /etc/crio/crio.conf)" "$(dirname "$crio_dropin")"/*.conf; do
		[ "$f" != "$crio_dropin" ] && grep -qs 'runtimes\.vmpod\]' "$f" || continue
		rm -f "$new"
		die "${f#"$HOST_ROOT"} already defines a vmpod runtime; remove it first"
	done
	mkdir -p "$(dirname "$crio_dropin")"
	cp "$new" "$crio_dropin.vmpod-tmp"
	chmod 0644 "$crio_dropin.vmpod-tmp"
	mv "$crio_dropin.vmpod-tmp" "$crio_dropin"
	rm -f "$new"
	log "added the vmpod runtime to CRI-O ($CRIO_CONFIG_DIR/50-vmpod.conf)"
	changed=true
}

unconfigure_crio() {
	[ -f "$crio_dropin" ] || return 0
	rm -f "$crio_dropin"
	log "removed $CRIO_CONFIG_DIR/50-vmpod.conf"
	changed=true
}

unconfigure() {
	[ -f "$config" ] || return 0
	check_markers
	new=$(mktemp)
	without_block "$config" >"$new"
	if cmp -s "$new" "$config"; then
		rm -f "$new"
		return 0
	fi
	if [ -f "$created_mark" ] && ! grep -qv '^version = [0-9]*$' "$new"; then
		rm -f "$config" "$created_mark" "$new"
		log "removed $CONTAINERD_CONFIG (the installer had created it)"
	else
		write_config "$new"
		rm -f "$new"
		log "removed the vmpod runtime from $CONTAINERD_CONFIG"
	fi
	changed=true
}

restart_containerd() {
	case $RESTART_CONTAINERD in
	none) log "$CONTAINER_RUNTIME not restarted (RESTART_CONTAINERD=none): restart it to apply the change" ;;
	systemctl)
		log "restarting $CONTAINER_RUNTIME (running containers and VMs keep running)"
		on_host systemctl restart "$CONTAINER_RUNTIME" || die "systemctl restart $CONTAINER_RUNTIME failed"
		;;
	*) die "RESTART_CONTAINERD=$RESTART_CONTAINERD: want systemctl or none" ;;
	esac
}

do_install() {
	check_host
	install_shim
	install_unit
	start_daemon
	changed=false
	if [ "$CONTAINER_RUNTIME" = crio ]; then
		configure_crio
	else
		configure
		link_shim
	fi
	if [ "$changed" = true ]; then restart_containerd; fi
}

do_uninstall() {
	changed=false
	if [ "$CONTAINER_RUNTIME" = crio ]; then unconfigure_crio; else unconfigure; fi
	if [ "$changed" = true ]; then restart_containerd; fi
	uninstall_daemon
	unlink_shim
	bindir=$(host "$VMPOD_DIR/bin")
	rm -f "$bindir/$SHIM" "$bindir/vm-runtime" "$bindir/vmpod-qemu" "$bindir/.vm-runtime.tmp" "$bindir/.vmpod-qemu.tmp" "$bindir/.$SHIM.tmp"
	rmdir "$bindir" "$(host "$VMPOD_DIR")" 2>/dev/null || true
	log "uninstalled"
}

case ${1:-} in
install) do_install ;;
uninstall) do_uninstall ;;
run)
	# A stop that comes while the node is being changed waits for the
	# change (a config write and a containerd restart) to finish.
	stopping=
	trap 'stopping=1' TERM INT
	case $VMPOD_RUN_MODE in
	install)
		do_install
		ready="installed; waiting"
		;;
	uninstall)
		do_uninstall
		ready="VMPOD_RUN_MODE=uninstall: vmpod is off this node; waiting (delete the DaemonSet now)"
		;;
	*) die "VMPOD_RUN_MODE=$VMPOD_RUN_MODE: want install or uninstall" ;;
	esac
	sleeper=
	stop() {
		# The sleep would outlive the script.
		if [ -n "$sleeper" ]; then kill "$sleeper" 2>/dev/null || true; fi
		if [ "$VMPOD_UNINSTALL_ON_STOP" = true ]; then
			do_uninstall
		else
			log "stopping; vmpod stays installed (VMPOD_UNINSTALL_ON_STOP=$VMPOD_UNINSTALL_ON_STOP)"
		fi
		exit 0
	}
	trap stop TERM INT
	if [ -n "$stopping" ]; then stop; fi
	# sleep in the background so the trap runs as soon as the signal comes;
	# the first one starts before the pod says it is ready. The shell may
	# take a signal that interrupted wait only once the next sleep has
	# started, before $! is read: the trap then misses that sleep, so no
	# sleep holds the script's output open (a reader would wait for it).
	sleep 3600 >/dev/null 2>&1 &
	sleeper=$!
	log "$ready"
	while :; do
		wait "$sleeper" || true
		sleep 3600 >/dev/null 2>&1 &
		sleeper=$!
	done
	;;
*)
	echo "usage: $0 install|uninstall|run" >&2
	exit 2
	;;
esac
