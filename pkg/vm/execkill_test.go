package vm

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestKillTreeScript runs the script a killed exec runs in the guest
// (killTreeScript) under each POSIX shell of this machine, on a command
// of the test's own that starts children, as the guest agent would run
// both: the command as this process's child, a session leader (through
// setsid) or not (a guest without setsid), the script as another child
// given the command's pid. Everything the command started goes; a child
// named to fool a parser of /proc/PID/stat goes too; a sibling of the
// command, in this process's group and session, stays.
func TestKillTreeScript(t *testing.T) {
	var shells [][]string
	for _, sh := range [][]string{{"sh"}, {"dash"}, {"bash"}, {"busybox", "sh"}} {
		if _, err := exec.LookPath(sh[0]); err == nil {
			shells = append(shells, sh)
		}
	}
	// sh and sleep are on every Debian machine; the others where
	// installed (hack/install-deps.sh installs busybox-static).
	if len(shells) == 0 || shells[0][0] != "sh" {
		t.Fatal("no sh on PATH")
	}
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatalf("no sleep on PATH: %v", err)
	}
	// A process named "x) S 1 1 1 (y": read up to the first ") ", its stat
	// says ppid, group and session 1.
	odd := filepath.Join(t.TempDir(), "x) S 1 1 1 (y")
	if err := os.Link(sleep, odd); err != nil {
		b, err := os.ReadFile(sleep)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(odd, b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	_, haveSetsid := exec.LookPath("setsid")

	for _, sh := range shells {
		for _, leader := range []bool{true, false} {
			name := strings.Join(sh, " ") + map[bool]string{true: ", session leader", false: ", plain child"}[leader]
			t.Run(name, func(t *testing.T) {
				// Distinct sleep times name this subtest's processes.
				base := 100000 + rand.IntN(800000)
				arg := func(i int) string { return strconv.Itoa(base + i) }
				script := fmt.Sprintf(`sleep %s & sleep %s & "$0" %s & `, arg(0), arg(1), arg(2))
				want := []string{arg(0), arg(1), arg(2)}
				if leader {
					// Left to init at once; only the group finds it.
					script += fmt.Sprintf(`(sleep %s &); `, arg(3))
					want = append(want, arg(3))
				}
				if haveSetsid == nil {
					// A session of its own, still a descendant.
					script += fmt.Sprintf(`setsid sleep %s & `, arg(4))
					want = append(want, arg(4))
				}
				script += "wait"
				cmd := exec.Command("/bin/sh", "-c", script, odd)
				cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: leader}
				sibling := exec.Command("sleep", arg(9))
				for _, c := range []*exec.Cmd{sibling, cmd} {
					if err := c.Start(); err != nil {
						t.Fatal(err)
					}
				}
				t.Cleanup(func() {
					_ = sibling.Process.Kill()
					_ = sibling.Wait()
					for _, a := range want {
						for _, pid := range pidsWithArg(a) {
							_ = syscall.Kill(pid, syscall.SIGKILL)
						}
					}
				})
				waitForArgs(t, want, true)

				kill := exec.Command(sh[0], slices.Concat(sh[1:], []string{"-c", killTreeScript, "vmpod-kill", strconv.Itoa(cmd.Process.Pid)})...)
				var stderr bytes.Buffer
				kill.Stderr = &stderr
				if err := kill.Run(); err != nil {
					t.Fatalf("the kill script: %v, stderr %q", err, stderr.String())
				}
				err := cmd.Wait()
				var exit *exec.ExitError
				if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
					t.Errorf("the command ended with %v, want SIGKILL", err)
				}
				waitForArgs(t, want, false)
				if pids := pidsWithArg(arg(9)); len(pids) != 1 {
					t.Errorf("the command's sibling (sleep %s): pids %v, want it running", arg(9), pids)
				}
			})
		}
	}
}

// waitForArgs waits, at most 10 s, until every arg in args is (running)
// or none is (!running) the last argument of a process; a zombie's is
// empty.
func waitForArgs(t *testing.T, args []string, running bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var found, missing []string
		for _, a := range args {
			if len(pidsWithArg(a)) > 0 {
				found = append(found, a)
			} else {
				missing = append(missing, a)
			}
		}
		if running && len(missing) == 0 || !running && len(found) == 0 {
			return
		}
		if time.Now().After(deadline) {
			if running {
				t.Fatalf("no process with last argument %v after 10 s", missing)
			}
			t.Fatalf("processes with last argument %v still run after 10 s", found)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// pidsWithArg lists the processes whose command line ends in arg.
func pidsWithArg(arg string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if args := strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00"); len(args) > 1 && args[len(args)-1] == arg {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestSetsidFailed: setsid's own failure to run the program is told from
// the program's exit statuses 126 and 127.
func TestSetsidFailed(t *testing.T) {
	tests := []struct {
		name string
		res  ExecResult
		want bool
	}{
		{"util-linux, no such program",
			ExecResult{ExitCode: 127, Stderr: []byte("setsid: failed to execute /no/such: No such file or directory\n")}, true},
		{"busybox, no such program",
			ExecResult{ExitCode: 127, Stderr: []byte("setsid: can't execute '/no/such': No such file or directory\n")}, true},
		{"util-linux, not executable",
			ExecResult{ExitCode: 126, Stderr: []byte("setsid: failed to execute /no/such: Permission denied\n")}, true},
		{"the program's own 127",
			ExecResult{ExitCode: 127, Stderr: []byte("sh: 1: nosuch: not found\n")}, false},
		{"another program's name",
			ExecResult{ExitCode: 127, Stderr: []byte("setsid: failed to execute other: No such file or directory\n")}, false},
		{"output on stdout",
			ExecResult{ExitCode: 127, Stdout: []byte("x"), Stderr: []byte("setsid: failed to execute /no/such: No such file or directory\n")}, false},
		{"more than one line",
			ExecResult{ExitCode: 127, Stderr: []byte("setsid: failed to execute /no/such: No such file or directory\nmore\n")}, false},
		{"another exit status",
			ExecResult{ExitCode: 1, Stderr: []byte("setsid: failed to execute /no/such: No such file or directory\n")}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			line, got := setsidFailed(tt.res, "/no/such")
			if got != tt.want {
				t.Errorf("setsidFailed(%q, exit %d) = %v, want %v", tt.res.Stderr, tt.res.ExitCode, got, tt.want)
			}
			if want := strings.TrimSuffix(string(tt.res.Stderr), "\n"); got && line != want {
				t.Errorf("line = %q, want %q", line, want)
			}
		})
	}
}
