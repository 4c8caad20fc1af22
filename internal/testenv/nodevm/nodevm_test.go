package nodevm

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
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

qemu-system-x86_64 --version | head -1 >qemu-version
# A nested TCG guest: time to its kernel's first serial line (and, when
# asked, to the test guest's /init marker).
want='Linux version'
[ -f nested-init ] && want='VMPOD-GUEST: init'
t0=$(date +%s%N)
qemu-system-x86_64 -accel tcg -machine q35 -m 256 -smp 1 -nodefaults -no-user-config \
	-display none -no-reboot -nic none -bios /usr/share/qemu/qboot.rom \
	-kernel vmlinux -initrd initrd.img -append 'console=ttyS0 panic=-1' \
	-serial file:/tmp/nested.log >nested.qemu 2>&1 &
pid=$!
i=0
while [ $i -lt 1200 ] && ! grep -q "$want" /tmp/nested.log 2>/dev/null; do
	sleep 0.1
	i=$((i + 1))
done
if grep -q "$want" /tmp/nested.log; then
	echo $((($(date +%s%N) - t0) / 1000000)) >nested-ms
fi
kill $pid
head -3 /tmp/nested.log >nested-serial
`

func TestNodeVM(t *testing.T) {
	start := time.Now()
	art := artifacts(t)
	files := map[string]string{
		"vmlinux":    filepath.Join(art, "vmlinux"),
		"initrd.img": filepath.Join(guestDir(t), "initrd.img"),
	}
	if os.Getenv("VMPOD_NODEVM_NESTED_INIT") != "" {
		flag := filepath.Join(t.TempDir(), "nested-init")
		if err := os.WriteFile(flag, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		files["nested-init"] = flag
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
	} {
		if got := file(c.name); got != c.want {
			t.Errorf("%s = %q, want %q (stderr: %s)", c.name, got, c.want, file(c.name+".err"))
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
	if file("nested-ms") == "" {
		t.Errorf("nested QEMU showed no serial line in 120 s; it said %q, serial %q", file("nested.qemu"), file("nested-serial"))
	}
	t.Logf("boot to run.sh: %.1fs (guest uptime %.1fs); QEMU %.1fs; whole test %.1fs; nested QEMU to %q: %s ms",
		res.Boot.Seconds(), res.GuestBoot.Seconds(), res.Total.Seconds(), time.Since(start).Seconds(),
		map[bool]string{false: "first serial line", true: "/init marker"}[files["nested-init"] != ""], file("nested-ms"))
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
