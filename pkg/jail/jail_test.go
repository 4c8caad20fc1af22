package jail_test

import (
	"bufio"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vmpod/vmpod/pkg/jail"
)

// The test binary is also the jailer when it runs as jail.EmulatorName,
// as vm-runtime is.
func TestMain(m *testing.M) {
	if filepath.Base(os.Args[0]) == jail.EmulatorName {
		os.Exit(jail.Main(os.Args[1:]))
	}
	if len(os.Args) > 1 && os.Args[1] == seccompProbeArg {
		os.Exit(seccompProbe())
	}
	os.Exit(m.Run())
}

const testUID = 0x70000000 + 4242

// jailer links the test binary as the jailer and writes and prepares the
// jail s; it returns the link and the spec file.
func jailer(t testing.TB, s jail.Spec) (link, spec string) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Fatal("the jailer needs root: run the tests as root, as make test does")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	link = filepath.Join(dir, jail.EmulatorName)
	if err := os.Symlink(exe, link); err != nil {
		t.Fatal(err)
	}
	spec = filepath.Join(dir, "jail.json")
	if err := jail.Write(spec, s); err != nil {
		t.Fatal(err)
	}
	if err := jail.Prepare(s); err != nil {
		t.Fatal(err)
	}
	return link, spec
}

// jailed runs script with /usr/bin/sh in place of QEMU, in the jail s
// describes, and returns its output.
func jailed(t *testing.T, s jail.Spec, script string) (string, error) {
	t.Helper()
	link, spec := jailer(t, s)
	cmd := exec.Command(link, "-c", script)
	cmd.Env = []string{jail.EnvSpec + "=" + spec, "PATH=/usr/bin:/bin"}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

type testJail struct {
	spec     jail.Spec
	vmDir    string // writable
	image    string // read-only file
	hostFile string // a host file the jail must not show
}

func newTestJail(t testing.TB) testJail {
	t.Helper()
	dir := t.TempDir()
	j := testJail{vmDir: filepath.Join(dir, "pod", "vm"), image: filepath.Join(dir, "rootfs", "disk", "disk.img"),
		hostFile: filepath.Join(dir, "host-secret")}
	for _, d := range []string{j.vmDir, filepath.Dir(j.image), filepath.Join(dir, "pod", "jail")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for path, content := range map[string]string{
		j.image:                          "image content\n",
		filepath.Join(j.vmDir, "nvram"):  "root's file in the VM dir\n",
		filepath.Join(j.vmDir, "disk"):   "QEMU's file in the VM dir\n",
		j.hostFile:                       "host secret\n",
		filepath.Join(dir, "pod", "key"): "not in the jail\n",
	} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The image file is world-readable, as the intake requires.
	if err := os.Chmod(j.image, 0o444); err != nil {
		t.Fatal(err)
	}
	j.spec = jail.Spec{
		QEMU: "/usr/bin/sh", UID: testUID, GID: testUID,
		Root:          filepath.Join(dir, "pod", "jail"),
		Writable:      []string{j.vmDir},
		Owned:         []string{filepath.Join(j.vmDir, "disk"), filepath.Join(j.vmDir, "absent")},
		ReadOnly:      []string{j.image},
		Devices:       []string{"/dev/null"}, // already there, world-usable
		DeviceDir:     filepath.Join(dir, "pod", "dev"),
		FileSizeLimit: 1 << 20,
	}
	return j
}

func statusFields(out string) map[string]string {
	f := map[string]string{}
	s := bufio.NewScanner(strings.NewReader(out))
	for s.Scan() {
		if k, v, ok := strings.Cut(s.Text(), ":"); ok {
			f[k] = strings.TrimSpace(v)
		}
	}
	return f
}

func TestJailCredentials(t *testing.T) {
	j := newTestJail(t)
	script := "cat /proc/self/status"
	if _, err := os.Stat("/dev/kvm"); err == nil {
		j.spec.Devices = append(j.spec.Devices, "/dev/kvm")
		script += "; echo kvm: $(stat -c '%u %a' /dev/kvm)"
	}
	out, err := jailed(t, j.spec, script)
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	f := statusFields(out)
	uid := strconv.Itoa(testUID)
	want := map[string]string{
		"Uid":        strings.Repeat(uid+"\t", 3) + uid,
		"Gid":        strings.Repeat(uid+"\t", 3) + uid,
		"Groups":     "",
		"CapInh":     "0000000000000000",
		"CapPrm":     "0000000000000000",
		"CapEff":     "0000000000000000",
		"CapBnd":     "0000000000000000",
		"CapAmb":     "0000000000000000",
		"NoNewPrivs": "1",
	}
	if slices.Contains(j.spec.Devices, "/dev/kvm") {
		want["kvm"] = uid + " 600"
	}
	for k, v := range want {
		if f[k] != v {
			t.Errorf("%s: %q, want %q", k, f[k], v)
		}
	}
}

func TestJailFiles(t *testing.T) {
	j := newTestJail(t)
	script := strings.Join([]string{
		"echo vm: $(cat " + j.vmDir + "/nvram)",
		"echo written >> " + j.vmDir + "/disk && echo write-owned: ok",
		"(echo x > " + j.vmDir + "/console.log) 2>/dev/null || echo create-vm: refused",
		"(echo x >> " + j.vmDir + "/nvram) 2>/dev/null || echo write-unowned: refused",
		"mv " + j.vmDir + "/disk " + j.vmDir + "/moved 2>/dev/null || echo rename-vm: refused",
		"rm -f " + j.vmDir + "/nvram 2>/dev/null; test -e " + j.vmDir + "/nvram && echo remove-vm: refused",
		"echo image: $(cat " + j.image + ")",
		"(echo x > " + j.image + ") 2>/dev/null || echo write-image: refused",
		"cat " + j.hostFile + " 2>/dev/null || echo host-file: hidden",
		"cat " + filepath.Join(filepath.Dir(j.vmDir), "key") + " 2>/dev/null || echo pod-key: hidden",
		"test -e /etc/passwd || echo etc-passwd: hidden",
		"test -e /var || echo var: hidden",
		"echo dev: $(ls /dev | tr '\\n' ' ')",
		"echo proc-owners: $(stat -c %u /proc/[0-9]* | sort -u)",
		"(echo x > /newfile) 2>/dev/null || echo write-root: refused",
		// 2 MiB into a 1 MiB cap: EFBIG, not SIGXFSZ.
		"head -c 2097152 /dev/zero > " + j.vmDir + "/disk 2>/dev/null; echo big: $(stat -c %s " + j.vmDir + "/disk)",
	}, "\n")
	out, err := jailed(t, j.spec, script)
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for _, line := range []string{
		"vm: root's file in the VM dir", "write-owned: ok", "create-vm: refused", "write-unowned: refused",
		"rename-vm: refused", "remove-vm: refused", "image: image content", "write-image: refused",
		"host-file: hidden", "pod-key: hidden", "etc-passwd: hidden", "var: hidden",
		"dev: full null random urandom zero", "proc-owners: " + strconv.Itoa(testUID), "write-root: refused", "big: 1048576",
	} {
		if !strings.Contains(out, line+"\n") {
			t.Errorf("no %q in the jail's output:\n%s", line, out)
		}
	}
	// The owned file belongs to the jail's uid, the VM's dir and its
	// other files stay root's; the host sees no mount of the jail once
	// it is gone.
	for p, uid := range map[string]uint32{filepath.Join(j.vmDir, "disk"): testUID, filepath.Join(j.vmDir, "nvram"): 0, j.vmDir: 0} {
		if st := mustStat(t, p); st.uid != uid {
			t.Errorf("%s owned by %d, want %d", p, st.uid, uid)
		}
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(mounts), j.spec.Root) {
		t.Errorf("a mount of the jail is left on the host:\n%s", mounts)
	}
	if left, _ := os.ReadDir(j.spec.Root); len(left) != 0 {
		t.Errorf("jail root not empty on the host: %v", left)
	}
}

// TestJailOOMScoreAdj: QEMU gets the container's oom_score_adj from the
// jail, not the one it inherits from libvirt's process (a runtime's,
// about -998 under containerd). The jailer starts here from a process at
// 300. A value the jailer may not set (below 300 without CAP_SYS_RESOURCE,
// as on nodes whose runtime has restrict_oom_score_adj) is clamped to the
// inherited one, and QEMU still starts. (Without the capability -997 is
// still allowed where a process with it set an ancestor's score that low:
// the kernel's floor is the least such value, which /proc does not show.)
func TestJailOOMScoreAdj(t *testing.T) {
	const inherited = 300
	lowered := []int{-997}
	if !hasCap(t, unix.CAP_SYS_RESOURCE) {
		lowered = append(lowered, inherited)
	}
	for _, tc := range []struct {
		name string
		adj  *int
		want []int
	}{
		{"none: inherited", nil, []int{inherited}},
		{"raised (a Burstable pod)", ptr(500), []int{500}},
		{"lowered (a Guaranteed pod)", ptr(-997), lowered},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := newTestJail(t)
			j.spec.OOMScoreAdj = tc.adj
			link, spec := jailer(t, j.spec)
			cmd := exec.Command("/usr/bin/sh", "-c", `echo `+strconv.Itoa(inherited)+` >/proc/self/oom_score_adj && exec "$0" "$@"`,
				link, "-c", "cat /proc/self/oom_score_adj")
			cmd.Env = []string{jail.EnvSpec + "=" + spec, "PATH=/usr/bin:/bin"}
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("%v: %s%s", err, stdout.String(), stderr.String())
			}
			got, err := strconv.Atoi(strings.TrimSpace(stdout.String()))
			if err != nil || !slices.Contains(tc.want, got) {
				t.Errorf("oom_score_adj in the jail: %q, want one of %v (stderr %q)", stdout.String(), tc.want, stderr.String())
			}
			if stderr.Len() > 0 {
				t.Logf("jailer: %s", stderr.String())
			}
		})
	}
}

// TestJailNetns: the jailer enters the network namespace the spec names
// before it execs QEMU, which runs there; the process that started the
// jailer (libvirt's, the runtime's) stays in its own.
func TestJailNetns(t *testing.T) {
	name := "vmpod-jailtest-" + strconv.Itoa(os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	var pod unix.Stat_t
	if err := unix.Stat("/run/netns/"+name, &pod); err != nil {
		t.Fatal(err)
	}
	j := newTestJail(t)
	j.spec.Netns = "/run/netns/" + name
	out, err := jailed(t, j.spec, "readlink /proc/self/ns/net")
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if want := "net:[" + strconv.FormatUint(pod.Ino, 10) + "]"; strings.TrimSpace(out) != want {
		t.Errorf("QEMU's network namespace: %q, want the spec's %s", strings.TrimSpace(out), want)
	}
	self, err := os.Readlink("/proc/thread-self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(out) == self {
		t.Errorf("QEMU is in the test's own network namespace %s", self)
	}

	j.spec.Netns = "/run/netns/" + name + "-gone"
	if out, err := jailed(t, j.spec, "true"); err == nil || !strings.Contains(out, "network namespace") {
		t.Errorf("a jail whose network namespace is gone: %v: %s; want the jailer to refuse", err, out)
	}
}

func ptr[T any](v T) *T { return &v }

// hasCap says whether this process has capability c in its effective set.
func hasCap(t *testing.T, c int) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	eff, err := strconv.ParseUint(statusFields(string(b))["CapEff"], 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	return eff&(1<<c) != 0
}

func TestJailRefusesGuestWithoutSpec(t *testing.T) {
	if os.Getuid() != 0 {
		t.Fatal("the jailer needs root: run the tests as root, as make test does")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), jail.EmulatorName)
	if err := os.Symlink(exe, link); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(link, "-name", "guest=x", "-machine", "pc")
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "refusing to run a guest without a jail") {
		t.Fatalf("a guest ran without a jail: %v: %s", err, out)
	}
}

func TestSpecValidate(t *testing.T) {
	good := jail.Spec{QEMU: "/usr/bin/qemu-system-x86_64", UID: testUID, GID: testUID, Root: "/var/lib/vmpod/pods/x/jail", Writable: []string{"/var/lib/vmpod/pods/x/vm"}}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mutate := range map[string]func(*jail.Spec){
		"root uid":       func(s *jail.Spec) { s.UID = 0 },
		"root gid":       func(s *jail.Spec) { s.GID = 0 },
		"relative qemu":  func(s *jail.Spec) { s.QEMU = "qemu" },
		"jail on /":      func(s *jail.Spec) { s.Root = "/" },
		"unclean path":   func(s *jail.Spec) { s.ReadOnly = []string{"/a/../etc/shadow"} },
		"host root":      func(s *jail.Spec) { s.Writable = []string{"/"} },
		"oom_score_adj":  func(s *jail.Spec) { s.OOMScoreAdj = ptr(1001) },
		"relative netns": func(s *jail.Spec) { s.Netns = "run/netns/x" },
		"owned outside":  func(s *jail.Spec) { s.Owned = []string{"/var/lib/vmpod/pods/y/vm/disk.qcow2"} },
		"owned the dir":  func(s *jail.Spec) { s.Owned = []string{"/var/lib/vmpod/pods/x/vm"} },
		"owned unclean":  func(s *jail.Spec) { s.Owned = []string{"/var/lib/vmpod/pods/x/vm/../../y"} },
		"capabilities for QEMU": func(s *jail.Spec) {
			s.Seccomp, s.Capabilities = jail.ProfileQEMU, []string{"CAP_CHOWN"}
		},
		"capabilities without a filter": func(s *jail.Spec) { s.Capabilities = []string{"CAP_CHOWN"} },
		"a capability no file server keeps": func(s *jail.Spec) {
			s.Seccomp, s.Capabilities = jail.ProfileVirtiofsd, []string{"CAP_CHOWN", "CAP_NET_ADMIN"}
		},
		"share unclean": func(s *jail.Spec) { s.Shares = []jail.Share{{Path: "/var/lib/kubelet/../../etc"}} },
		"share /":       func(s *jail.Spec) { s.Shares = []jail.Share{{Path: "/"}} },
	} {
		s := good
		mutate(&s)
		if s.Validate() == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestJailShares: a file server's shares are shown at their own paths
// with what is mounted below them, their files' owners and modes as they
// are; a read-only one refuses writes all through (EROFS), the mount
// below it too, and no share lets a set-uid bit or a device node work.
func TestJailShares(t *testing.T) {
	j := newTestJail(t)
	dir := t.TempDir()
	rw, ro := filepath.Join(dir, "volumes", "data"), filepath.Join(dir, "volumes", "config")
	sub := filepath.Join(ro, "sub")
	for _, d := range []string{rw, sub} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(ro, "key"), []byte("value\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(rw, testUID, testUID); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", sub, "tmpfs", 0, "size=64k"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(sub, unix.MNT_DETACH) })
	j.spec.Shares = []jail.Share{{Path: rw}, {Path: ro, ReadOnly: true}}
	out, err := jailed(t, j.spec, `
cat `+ro+`/key
echo w >`+rw+`/new && echo "rw: ok"
(echo w >`+ro+`/new) 2>/dev/null || echo "ro: refused"
(echo w >`+sub+`/new) 2>/dev/null || echo "ro below: refused"
grep -E " `+rw+` | `+ro+` | `+sub+` " /proc/self/mountinfo`)
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	t.Logf("in the jail:\n%s", out)
	for _, want := range []string{"value", "rw: ok", "ro: refused", "ro below: refused"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || !strings.HasPrefix(f[4], dir) {
			continue
		}
		opts := f[5]
		for _, o := range []string{"nosuid", "nodev", "noexec"} {
			if !strings.Contains(opts, o) {
				t.Errorf("%s: mount options %s, want %s", f[4], opts, o)
			}
		}
		if ro := f[4] != rw; ro != strings.HasPrefix(opts, "ro") {
			t.Errorf("%s: mount options %s, read-only %v", f[4], opts, ro)
		}
	}
	if b, err := os.ReadFile(filepath.Join(rw, "new")); err != nil || string(b) != "w\n" {
		t.Errorf("the rw share's new file on the host: %q, %v", b, err)
	}
	if st := mustStat(t, filepath.Join(ro, "key")); st.uid != 0 {
		t.Errorf("the share's file was given to uid %d", st.uid)
	}
}

type fileStat struct{ uid, gid uint32 }

func mustStat(t *testing.T, p string) fileStat {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return fileStat{uid: st.Uid, gid: st.Gid}
}

// BenchmarkJail is what the jail adds to QEMU's start (make bench): the
// jailer's setup (chown, mount namespace, root, credentials) and exec of
// /usr/bin/true, next to the plain exec in BenchmarkNoJail.
func BenchmarkJail(b *testing.B) {
	if os.Getuid() != 0 {
		b.Fatal("the jailer needs root: run the benchmarks as root, as make bench does")
	}
	j := newTestJail(b)
	j.spec.QEMU = "/usr/bin/true"
	link, spec := jailer(b, j.spec)
	for b.Loop() {
		cmd := exec.Command(link)
		cmd.Env = []string{jail.EnvSpec + "=" + spec}
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%v: %s", err, out)
		}
	}
}

func BenchmarkNoJail(b *testing.B) {
	for b.Loop() {
		if out, err := exec.Command("/usr/bin/true").CombinedOutput(); err != nil {
			b.Fatalf("%v: %s", err, out)
		}
	}
}

// TestJailNamespaces: QEMU has IPC and UTS namespaces of its own: a
// System V shared memory segment of the node is out of its sight, and it
// sees the jail's host name, not the node's.
func TestJailNamespaces(t *testing.T) {
	id, err := unix.SysvShmGet(unix.IPC_PRIVATE, 4096, unix.IPC_CREAT|0o666)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = unix.SysvShmCtl(id, unix.IPC_RMID, nil) })
	j := newTestJail(t)
	out, err := jailed(t, j.spec, "readlink /proc/self/ns/ipc /proc/self/ns/uts; cat /proc/sys/kernel/hostname; cat /proc/sysvipc/shm")
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for _, ns := range []string{"ipc", "uts"} {
		self, err := os.Readlink("/proc/self/ns/" + ns)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(out, self) {
			t.Errorf("QEMU shares the node's %s namespace %s:\n%s", ns, self, out)
		}
	}
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "\nvmpod-qemu\n") || strings.Contains(out, "\n"+host+"\n") {
		t.Errorf("QEMU's host name: want vmpod-qemu, not the node's %q:\n%s", host, out)
	}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[1] == strconv.Itoa(id) {
			t.Errorf("QEMU sees the node's shared memory segment %d: %s", id, line)
		}
	}
}

// virtiofsd is QEMU 7.2's virtio-fs file server (Debian's
// qemu-system-common), the one a VM's shares are served by.
const virtiofsd = "/usr/lib/qemu/virtiofsd"

// started is a process a test started, and its end.
type started struct {
	cmd  *exec.Cmd
	out  strings.Builder
	done chan struct{} // closed when it ended; err is then its Wait's
	err  error
}

func start(t *testing.T, cmd *exec.Cmd) *started {
	t.Helper()
	p := &started{cmd: cmd, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = &p.out, &p.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	t.Cleanup(p.stop)
	return p
}

func (p *started) stop() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

func (p *started) ended() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// TestJailVirtiofsd: the real virtio-fs server runs in a file server's
// jail (its socket handed to it as fd 3, the share in sight) and, once
// QEMU connects, builds its own sandbox there (namespaces, pivot_root
// into the share, its own seccomp filter, its capability drop): it then
// serves as the jail's uid with the file-serving capabilities only, under
// two filters, and ends by itself when QEMU goes.
func TestJailVirtiofsd(t *testing.T) {
	if _, err := os.Stat(virtiofsd); err != nil {
		t.Fatalf("%s (qemu-system-common, which make deps installs): %v", virtiofsd, err)
	}
	j := newTestJail(t)
	share := filepath.Join(t.TempDir(), "volume")
	if err := os.Mkdir(share, 0o755); err != nil {
		t.Fatal(err)
	}
	j.spec.QEMU, j.spec.Seccomp = virtiofsd, jail.ProfileVirtiofsd
	j.spec.Capabilities = slices.Sorted(maps.Keys(jail.FileServerCapabilities))
	j.spec.Shares = []jail.Share{{Path: share}}
	link, spec := jailer(t, j.spec)

	sock := filepath.Join(t.TempDir(), "fs.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false) // the socket file stays for QEMU; the test's dir goes
	lf, err := l.File()
	l.Close()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(link, "--fd=3", "-o", "source="+share, "-o", "cache=auto", "-o", "sandbox=namespace",
		"-o", "modcaps=-mknod:-setfcap", "-o", "log_level=warn")
	cmd.Env = []string{jail.EnvSpec + "=" + spec}
	cmd.ExtraFiles = []*os.File{lf}
	server := start(t, cmd)
	lf.Close()

	qemu := start(t, exec.Command("qemu-system-x86_64", "-S", "-nodefaults", "-no-user-config", "-display", "none",
		"-machine", "q35,memory-backend=mem", "-accel", "tcg", "-m", "64M",
		"-object", "memory-backend-memfd,id=mem,size=64M,share=on",
		"-chardev", "socket,id=fs,path="+sock, "-device", "vhost-user-fs-pci,chardev=fs,tag=test"))

	// The server forks once its sandbox's PID namespace is made: the child
	// serves. Wait (bounded) until it runs under its own filter too and
	// has dropped the capabilities it set its sandbox up with: it installs
	// its filter first, then its bounding set, then the rest, so a read
	// between them sees the rest still held (seen under load). A worker
	// that never drops them fails the checks below at the deadline.
	const wantCaps = "00000000000000db"
	var worker map[string]string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", server.cmd.Process.Pid, server.cmd.Process.Pid)); err == nil {
			if f := strings.Fields(string(b)); len(f) > 0 {
				if st, err := os.ReadFile("/proc/" + f[0] + "/status"); err == nil {
					if worker = statusFields(string(st)); worker["Seccomp_filters"] == "2" && worker["CapEff"] == wantCaps {
						break
					}
				}
			}
		}
		switch {
		case server.ended():
			t.Fatalf("virtiofsd ended: %v: %s", server.err, server.out.String())
		case qemu.ended():
			t.Fatalf("QEMU ended: %v: %s", qemu.err, qemu.out.String())
		case time.Now().After(deadline) && worker["Seccomp_filters"] == "2":
		case time.Now().After(deadline):
			t.Fatalf("virtiofsd's worker never ran under two filters (last %v); server: %s; QEMU: %s", worker, server.out.String(), qemu.out.String())
		default:
			continue
		}
		break
	}
	t.Logf("virtiofsd's worker: Uid %s, CapEff %s, CapBnd %s, NoNewPrivs %s, Seccomp_filters %s",
		worker["Uid"], worker["CapEff"], worker["CapBnd"], worker["NoNewPrivs"], worker["Seccomp_filters"])
	id := strconv.Itoa(testUID)
	ids := strings.Repeat(id+"\t", 3) + id
	for k, v := range map[string]string{"Uid": ids, "Gid": ids, "Groups": "", "NoNewPrivs": "1", "Seccomp": "2",
		"CapEff": wantCaps, "CapPrm": wantCaps, "CapBnd": "0000000000000000"} {
		if worker[k] != v {
			t.Errorf("virtiofsd's worker: %s %q, want %q", k, worker[k], v)
		}
	}

	// QEMU goes: the server ends by itself.
	qemu.stop()
	select {
	case <-server.done:
	case <-time.After(30 * time.Second):
		t.Errorf("virtiofsd still runs 30 s after QEMU went: %s", server.out.String())
	}
}
