package jail_test

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/vmpod/vmpod/pkg/jail"
)

// seccompProbeArg makes the test binary, exec'd by the jailer in place of
// qemu-img, try what the filter denies and print what happened.
const seccompProbeArg = "-jail-test-seccomp-probe"

func errnoOf(err error) string {
	var e unix.Errno
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &e):
		return unix.ErrnoName(e)
	}
	return err.Error()
}

func seccompProbe() int {
	say := func(name string, err error) { fmt.Printf("%s: %s\n", name, errnoOf(err)) }
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		fmt.Println(err)
		return 1
	}
	st := statusFields(string(status))
	for _, k := range []string{"Seccomp", "NoNewPrivs", "CapEff", "CapAmb", "CapBnd"} {
		fmt.Printf("%s: %s\n", k, st[k])
	}

	tid := make(chan int)
	go func() {
		runtime.LockOSThread() // a thread of its own: clone with CLONE_THREAD
		tid <- unix.Gettid()
	}()
	if <-tid != unix.Gettid() {
		fmt.Println("thread: ok")
	}
	say("fork", exec.Command("/usr/bin/true").Run())
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 0)
	if err == nil {
		unix.Close(fd)
	}
	say("socket", err)
	fd, err = unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err == nil {
		unix.Close(fd)
	}
	say("unix socket", err)
	say("process_vm_writev", rawErr(unix.Syscall6(unix.SYS_PROCESS_VM_WRITEV, uintptr(os.Getppid()), 0, 0, 0, 0, 0)))
	say("userfaultfd", rawErr(unix.Syscall(unix.SYS_USERFAULTFD, 0, 0, 0)))
	say("keyctl", rawErr(unix.Syscall(unix.SYS_KEYCTL, 0, 0, 0)))
	say("symlink", unix.Symlinkat("/etc/passwd", unix.AT_FDCWD, "/proc/self/fd/0"))
	say("getxattr", rawErr(unix.Syscall6(unix.SYS_GETXATTR, 0, 0, 0, 0, 0, 0)))
	say("unshare", unix.Unshare(unix.CLONE_NEWUSER))
	credentialSwitch(say)
	say("mount", unix.Mount("none", "/", "tmpfs", 0, ""))
	say("ptrace", unix.PtraceAttach(os.Getppid()))
	say("setuid", unix.Setuid(0))
	say("bpf", rawErr(unix.Syscall(unix.SYS_BPF, 0, 0, 0)))
	say("clone3", rawErr(unix.Syscall(unix.SYS_CLONE3, 0, 0, 0)))
	say("io_uring_setup", rawErr(unix.Syscall(unix.SYS_IO_URING_SETUP, 1, 0, 0)))
	if runtime.GOARCH == "amd64" {
		say("x32 getpid", rawErr(unix.Syscall(0x40000000|unix.SYS_GETPID, 0, 0, 0)))
	}
	return 0
}

// credentialSwitch does what a file server does for a request of root's
// and back, on this thread alone, and says what capabilities it has as
// euid 0 and after. unshare(CLONE_FS) too: the server's threads each
// have a filesystem context of their own.
func credentialSwitch(say func(string, error)) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	say("unshare fs", unix.Unshare(unix.CLONE_FS))
	eff := func() string {
		b, _ := os.ReadFile("/proc/thread-self/status")
		return statusFields(string(b))["CapEff"]
	}
	uid := uintptr(os.Getuid())
	err := rawErr(unix.RawSyscall(unix.SYS_SETRESUID, ^uintptr(0), 0, ^uintptr(0)))
	say("seteuid 0", err)
	if err == nil {
		fmt.Printf("CapEff as euid 0: %s\n", eff())
		say("seteuid back", rawErr(unix.RawSyscall(unix.SYS_SETRESUID, ^uintptr(0), uid, ^uintptr(0))))
		fmt.Printf("CapEff back: %s\n", eff())
	}
}

func rawErr(_, _ uintptr, e unix.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

// TestJailSeccomp: a jail with a seccomp profile runs its program under
// the jailer's filter: threads work; new processes, namespaces, mounts,
// tracing, other processes' memory, BPF, keys, io_uring and the x32 ABI
// do not. qemu-img's deny list refuses every socket. QEMU's allow list
// lets AF_UNIX sockets through, refuses others, and fails what it does
// not name (a link, an xattr) with ENOSYS. Without a profile the same
// program forks and opens a socket. The probe is a Go program: its
// runtime (threads, signals, the netpoller) runs under the allow list
// too, as QEMU's glibc and glib do.
func TestJailSeccomp(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	run := func(t *testing.T, profile jail.Profile, caps ...string) map[string]string {
		j := newTestJail(t)
		j.spec.QEMU, j.spec.Seccomp, j.spec.Capabilities = exe, profile, caps
		link, spec := jailer(t, j.spec)
		cmd := exec.Command(link, seccompProbeArg)
		cmd.Env = []string{jail.EnvSpec + "=" + spec, "PATH=/usr/bin:/bin"}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		t.Logf("probe:\n%s", out)
		return statusFields(string(out))
	}
	check := func(t *testing.T, got, want map[string]string) {
		t.Helper()
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s: %q, want %q", k, got[k], v)
			}
		}
	}
	refused := func() map[string]string {
		want := map[string]string{
			"Seccomp": "2", "thread": "ok",
			"fork": "EPERM", "socket": "EPERM", "unshare": "EPERM", "mount": "EPERM",
			"ptrace": "EPERM", "setuid": "EPERM", "bpf": "EPERM", "process_vm_writev": "EPERM",
			"userfaultfd": "EPERM", "keyctl": "EPERM",
			"clone3": "ENOSYS", "io_uring_setup": "ENOSYS",
		}
		if runtime.GOARCH == "amd64" {
			want["x32 getpid"] = "ENOSYS"
		}
		return want
	}
	t.Run("qemu-img", func(t *testing.T) {
		want := refused()
		want["unix socket"] = "EPERM"
		check(t, run(t, jail.ProfileImageTool), want)
	})
	t.Run("qemu", func(t *testing.T) {
		want := refused()
		want["unix socket"], want["symlink"], want["getxattr"] = "ok", "ENOSYS", "ENOSYS"
		check(t, run(t, jail.ProfileQEMU), want)
	})
	// A file server's: it keeps the capabilities it serves files and
	// builds its sandbox with, across its switches to euid 0 and back,
	// makes threads, processes, and a filesystem context of a thread's
	// own, and still gets no socket, user namespace, ptrace, BPF or key.
	t.Run("virtiofsd", func(t *testing.T) {
		got := run(t, jail.ProfileVirtiofsd, slices.Sorted(maps.Keys(jail.FileServerCapabilities))...)
		const caps = "00000000002001db" // CHOWN DAC_OVERRIDE FOWNER FSETID SETGID SETUID SETPCAP SYS_ADMIN
		want := refused()
		want["fork"], want["unix socket"], want["unshare fs"] = "ok", "EPERM", "ok"
		delete(want, "mount") // its sandbox mounts, in the jail's own namespace
		want["NoNewPrivs"], want["CapEff"], want["CapAmb"], want["CapBnd"] = "1", caps, caps, caps
		want["seteuid 0"], want["CapEff as euid 0"], want["seteuid back"], want["CapEff back"] = "ok", caps, "ok", caps
		check(t, got, want)
	})
	t.Run("none", func(t *testing.T) {
		got := run(t, "")
		check(t, got, map[string]string{"Seccomp": "0", "thread": "ok", "fork": "ok", "socket": "ok", "unix socket": "ok"})
		for _, k := range []string{"clone3", "io_uring_setup", "userfaultfd", "symlink", "getxattr"} {
			if strings.Contains(got[k], "ENOSYS") {
				t.Errorf("%s: ENOSYS without the filter: the kernel lacks it, so the test proves nothing of it", k)
			}
		}
	})
	t.Run("unknown profile", func(t *testing.T) {
		s := newTestJail(t).spec
		s.Seccomp = "docker-default"
		if err := s.Validate(); err == nil || !strings.Contains(err.Error(), `"qemu"`) {
			t.Errorf("Validate of profile %q: %v, want an error naming the profiles", s.Seccomp, err)
		}
	})
}
