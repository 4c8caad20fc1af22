#!/usr/bin/env bash
# Measure what a vmpod VM costs beyond its guest RAM under TCG, and print the
# table the constants of vmspec.OverheadTCG (pkg/vmspec/overhead.go) come
# from. See docs/overhead.md.
#
# It boots the test guest (hack/guest/build.sh) through the real converter
# and the embedded libvirt driver (hack/overhead), for 128 MiB to 2 GiB of
# guest RAM and 1 and 2 vCPUs, with a virtio NIC on a tap, makes the guest
# touch all of its RAM (kernel parameter init_on_free=1: the guest kernel
# zeroes every free page at boot, no change to the guest's /init needed),
# and samples QEMU's memory; the shim's part is -shim-mib (default 8 MiB,
# BenchmarkShimFootprint's shim PSS per pod).
#
# Usage: hack/measure-overhead.sh [hack/overhead flags, e.g. -sizes 256,1024 -vcpus 1 -json out.json]
# Needs root (QEMU, cgroups, a network namespace). Takes 3-5 minutes on an idle
# 2-core machine; new VMs stop starting after 6 minutes and the whole run is
# killed after 9, so it always ends within 10. Everything it starts (the
# helper, QEMU, the network namespace and its tap, the scratch dir, libvirt's
# cgroups) is gone when it exits, whether it succeeded or not.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ $EUID -ne 0 ]]; then
  echo "measure-overhead: needs root (QEMU, cgroups, a network namespace)" >&2
  exit 1
fi
guest_dir=${VMPOD_GUEST_DIR:-_output/guest}
if [[ ! -f $guest_dir/vmlinux || ! -f $guest_dir/disk.qcow2 ]]; then
  echo "measure-overhead: no test guest in $guest_dir: run make guest (hack/guest/build.sh)" >&2
  exit 1
fi
caps_cache=${VMPOD_CAPS_CACHE:-_output/cache/qemu-capabilities}

work=$(mktemp -d /tmp/vmpod-ovh-XXXXXX) # short: QEMU's unix socket paths
cleanup() {
  # QEMU outlives a helper that was killed: stop every process whose
  # command line names this run's scratch dir (only ours can), by pid.
  local pids=() p
  for p in /proc/[0-9]*; do
    if grep -qsF -- "$work/" "$p/cmdline"; then
      pids+=("${p#/proc/}")
    fi
  done
  if ((${#pids[@]})); then
    kill -9 "${pids[@]}" 2>/dev/null || true
    for p in "${pids[@]}"; do
      while kill -0 "$p" 2>/dev/null; do sleep 0.1; done
    done
  fi
  # libvirt names a VM's cgroups after its domain; ours are vmpod-overhead_*.
  # rmdir removes only empty ones, so nothing of another process goes.
  find /sys/fs/cgroup/*/machine -depth -type d -path '*vmpod-overhead*' -exec rmdir {} + 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

go build -o "$work/overhead" ./hack/overhead

# A network namespace of its own for the run: the guest NIC's tap lives
# there and disappears with it; no address is configured, nothing is sent.
start=$(date +%s)
timeout --signal=TERM --kill-after=20s 9m \
  unshare --net -- bash -c '
    set -e
    ip link set lo up
    ip tuntap add dev vmpodtap0 mode tap
    ip link set vmpodtap0 up
    exec "$@"' measure-overhead \
  "$work/overhead" -root "$work/run" -tap vmpodtap0 -guest-dir "$guest_dir" \
  -capabilities-cache "$caps_cache" -deadline 6m -boot-timeout 150s "$@"
echo "measure-overhead: $(($(date +%s) - start)) s"
