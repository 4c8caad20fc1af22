package jail_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
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
	fmt.Printf("Seccomp: %s\n", statusFields(string(status))["Seccomp"])

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
	say("unshare", unix.Unshare(unix.CLONE_NEWUSER))
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

func rawErr(_, _ uintptr, e unix.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

// TestJailSeccomp: a jail with Seccomp (qemu-img's) runs its program under
// the jailer's filter: threads work, new processes, sockets, namespaces,
// mounts, tracing, BPF, io_uring and the x32 ABI do not. Without Seccomp
// (QEMU's jail, where QEMU installs its own) the same program forks and
// opens a socket.
func TestJailSeccomp(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	run := func(t *testing.T, filter bool) map[string]string {
		j := newTestJail(t)
		j.spec.QEMU, j.spec.Seccomp = exe, filter
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
	t.Run("filter", func(t *testing.T) {
		got := run(t, true)
		want := map[string]string{
			"Seccomp": "2", "thread": "ok",
			"fork": "EPERM", "socket": "EPERM", "unshare": "EPERM", "mount": "EPERM",
			"ptrace": "EPERM", "setuid": "EPERM", "bpf": "EPERM",
			"clone3": "ENOSYS", "io_uring_setup": "ENOSYS",
		}
		if runtime.GOARCH == "amd64" {
			want["x32 getpid"] = "ENOSYS"
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s: %q, want %q", k, got[k], v)
			}
		}
	})
	t.Run("no filter", func(t *testing.T) {
		got := run(t, false)
		for k, v := range map[string]string{"Seccomp": "0", "thread": "ok", "fork": "ok", "socket": "ok"} {
			if got[k] != v {
				t.Errorf("%s: %q, want %q", k, got[k], v)
			}
		}
		for _, k := range []string{"clone3", "io_uring_setup"} {
			if strings.Contains(got[k], "ENOSYS") {
				t.Errorf("%s: ENOSYS without the filter: the kernel lacks it, so the test proves nothing of it", k)
			}
		}
	})
}
