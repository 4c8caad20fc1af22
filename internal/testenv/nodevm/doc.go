// Package nodevm boots a Kubernetes-style node as a VM, for tests that must
// see what users' nodes look like rather than this machine: cgroup v2 only
// (cgroup_no_v1=all), systemd as PID 1 and D-Bus running, so that transient
// units and slices (the systemd cgroup driver's kubepods-*.slice) work.
//
// The VM runs under QEMU TCG (a /dev/kvm here may not run guests at all) on
// the test guest's kernel, with this machine's own root read-only over
// virtio-9p under a tmpfs overlay, so every binary installed here is there
// too. hack/nodevm/build.sh builds the initramfs and the systemd units that
// run the test's script; the only other way in or out is a read-write 9p
// share at ShareDir. The VM has no network device.
//
// Run builds (cached) and boots the VM, runs Options.Script as
// ShareDir/run.sh once D-Bus is up, and returns its exit code, output and
// the files it left in the share. QEMU is killed by PID on timeout and when
// the test ends; the share and logs live in t.TempDir. A guest that
// freezes as a whole (its heartbeat, a loop beside run.sh, stands still
// for Options.Stall) is killed and booted once more: seen once here under
// TCG, and it says nothing of the test.
//
// Tests need root (9p passthrough keeps owners and modes).
//
// This package imports the standard library only.
package nodevm
