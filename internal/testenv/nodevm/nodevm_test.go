package nodevm

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// probe runs in the node VM. It records facts in files for the test to
// judge, so that a failure says which fact was wrong.
const probe = `#!/bin/sh
stat -fc %T /sys/fs/cgroup >cgroupfs
cat /proc/1/comm >pid1
cat /sys/fs/cgroup/cgroup.controllers >controllers
# systemd reached over the system bus (dbus-daemon), as the systemd cgroup
# driver of containerd and the kubelet reaches it.
busctl get-property org.freedesktop.systemd1 /org/freedesktop/systemd1 \
	org.freedesktop.systemd1.Manager Version >busctl 2>&1
systemd-run --slice=kubepods-besteffort-podabc.slice --unit=probe --scope \
	sh -c 'cat /proc/self/cgroup; sleep 1' >scope 2>scope.err
systemd-analyze >analyze 2>&1
# The kernel loads the modules a pod network needs on demand.
{ ip link add vmpodbr0 type bridge && ip link add vmpodv0 type veth peer name vmpodv1 &&
	ip tuntap add dev vmpodtap0 mode tap && tc qdisc add dev vmpodtap0 ingress &&
	tc filter add dev vmpodtap0 parent ffff: protocol all u32 match u32 0 0 \
		action mirred egress redirect dev vmpodv0 && echo ok; } >netmods 2>&1

qemu-system-x86_64 --version | head -1 >qemu-version
# A nested TCG machine initialises (and quits at its monitor's prompt).
echo quit | qemu-system-x86_64 -accel tcg -machine q35 -nodefaults -no-user-config \
	-display none -nic none -S -monitor stdio >nested-start 2>&1
echo $? >nested-start-exit

# Only when asked (slow): time a nested TCG guest to its kernel's first
# serial line, or to the test guest's /init marker.
case $(cat nested 2>/dev/null) in
boot) want='Linux version' ;;
init) want='VMPOD-GUEST: init' ;;
*) exit 0 ;;
esac
t0=$(date +%s%N)
qemu-system-x86_64 -accel tcg -machine q35 -m 256 -smp 1 -nodefaults -no-user-config \
	-display none -no-reboot -nic none -bios /usr/share/qemu/qboot.rom \
	-kernel vmlinux -initrd initrd.img -append 'console=ttyS0 panic=-1' \
	-serial file:/tmp/nested.log >nested.qemu 2>&1 &
pid=$!
i=0
while [ $i -lt 1800 ] && ! grep -q "$want" /tmp/nested.log 2>/dev/null; do
	sleep 0.1
	i=$((i + 1))
done
if grep -q "$want" /tmp/nested.log; then
	echo $((($(date +%s%N) - t0) / 1000000)) >nested-ms
fi
kill $pid
head -3 /tmp/nested.log >nested-serial
`

// TestNodeVM proves the harness: the node is cgroup v2 with systemd as
// PID 1 and D-Bus, and systemd makes kubepods slices as the kubelet's systemd
// driver asks. VMPOD_NODEVM_NESTED=boot (or init) also times a nested TCG
// guest to its first serial line (or the test guest's /init); that adds
// tens of seconds, so CI leaves it out.
func TestNodeVM(t *testing.T) {
	start := time.Now()
	files := map[string]string{}
	nested := os.Getenv("VMPOD_NODEVM_NESTED")
	switch nested {
	case "":
	case "boot", "init":
		flag := filepath.Join(t.TempDir(), "nested")
		if err := os.WriteFile(flag, []byte(nested), 0o644); err != nil {
			t.Fatal(err)
		}
		files["nested"] = flag
		files["vmlinux"] = filepath.Join(artifacts(t), "vmlinux")
		files["initrd.img"] = filepath.Join(guestDir(t), "initrd.img")
	default:
		t.Fatalf("VMPOD_NODEVM_NESTED=%q: want boot or init", nested)
	}
	res := Run(t, Options{Script: probe, Files: files, Timeout: 4 * time.Minute})
	if res.ExitCode != 0 {
		t.Errorf("run.sh exited %d:\n%s", res.ExitCode, res.Output)
	}
	if res.SystemState != "running" {
		t.Errorf("is-system-running = %q, want running", res.SystemState)
	}
	file := func(name string) string { return strings.TrimSpace(string(res.Files[name])) }

	for _, c := range []struct{ name, want string }{
		{"cgroupfs", "cgroup2fs"},
		{"pid1", "systemd"},
		{"scope", "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podabc.slice/probe.scope"},
		{"nested-start-exit", "0"},
		{"netmods", "ok"},
	} {
		if got := file(c.name); got != c.want {
			t.Errorf("%s = %q, want %q (%s)", c.name, got, c.want, file(c.name+".err")+file(strings.TrimSuffix(c.name, "-exit")))
		}
	}
	ctrl := strings.Fields(file("controllers"))
	for _, want := range []string{"cpu", "memory"} {
		if !contains(ctrl, want) {
			t.Errorf("cgroup2 controllers %v lack %s", ctrl, want)
		}
	}
	// A string property reads back as: s "252.38-1~deb12u1".
	if got := file("busctl"); !strings.HasPrefix(got, `s "`) {
		t.Errorf("systemd over D-Bus: busctl said %q", got)
	}
	if got := file("qemu-version"); !strings.HasPrefix(got, "QEMU emulator version") {
		t.Errorf("nested qemu --version: %q", got)
	}
	if nested != "" && file("nested-ms") == "" {
		t.Errorf("nested QEMU did not get to %s in 180 s; it said %q, serial %q", nested, file("nested.qemu"), file("nested-serial"))
	}
	t.Logf("boot to run.sh: %.1fs (guest uptime %.1fs); QEMU %.1fs; whole test %.1fs",
		res.Boot.Seconds(), res.GuestBoot.Seconds(), res.Total.Seconds(), time.Since(start).Seconds())
	if nested != "" {
		t.Logf("nested TCG guest to %s: %s ms", map[string]string{"boot": "its first serial line", "init": "the test guest's /init"}[nested], file("nested-ms"))
	}
	t.Logf("systemd-analyze: %s", file("analyze"))
}

func TestShareNames(t *testing.T) {
	for _, name := range []string{"../x", "/etc/passwd", "run.sh", ".nodevm/exit", "a/../../b"} {
		if _, err := sharePath("/share", name); err == nil {
			t.Errorf("sharePath(%q) accepted", name)
		}
	}
	if got, err := sharePath("/share", "bin/tool"); err != nil || got != "/share/bin/tool" {
		t.Errorf("sharePath(bin/tool) = %q, %v", got, err)
	}
}

// guestDir is where hack/nodevm/build.sh took the kernel from, as it does.
func guestDir(t *testing.T) string {
	if d := os.Getenv("VMPOD_GUEST_DIR"); d != "" {
		return d
	}
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "_output", "guest")
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestStalledGuestBootsAgain: a guest that stops as a whole once run.sh
// started (QEMU stopped with SIGSTOP, as a frozen emulator) has no
// heartbeat; after Options.Stall the VM is killed and booted once more,
// and that run's result is the one returned.
func TestStalledGuestBootsAgain(t *testing.T) {
	var stopped []int
	res := Run(t, Options{Script: "echo hello\nsleep 12\necho bye\n", Timeout: 4 * time.Minute, Stall: 15 * time.Second,
		onRunning: func(pid int) {
			if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
				t.Errorf("stop QEMU %d: %v", pid, err)
			}
			stopped = append(stopped, pid)
		}})
	if len(stopped) != 1 {
		t.Errorf("QEMU stopped %d times (%v), want once: the second boot runs as asked", len(stopped), stopped)
	}
	if res.ExitCode != 0 || res.Output != "hello\nbye\n" {
		t.Errorf("the second boot's run.sh: exit %d, output %q", res.ExitCode, res.Output)
	}
	if syscall.Kill(stopped[0], 0) == nil {
		t.Errorf("the stalled QEMU %d still exists", stopped[0])
	}
}
