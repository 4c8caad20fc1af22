package testguest

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// AssertJailed checks that the QEMU process pid runs as pkg/jail makes it:
// as uid (and gid) uid, not 0, with no capability in any set, no_new_privs,
// its seccomp filter on (Seccomp: 2, filter mode), and in a mount namespace
// of its own whose root shows no host file (/etc/passwd).
func AssertJailed(t testing.TB, pid int, uid uint32) {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatalf("QEMU %d: %v", pid, err)
	}
	status := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			status[k] = strings.TrimSpace(v)
		}
	}
	id := strconv.FormatUint(uint64(uid), 10)
	ids := strings.Repeat(id+"\t", 3) + id
	want := map[string]string{
		"Uid": ids, "Gid": ids, "Groups": "",
		"CapInh": "0000000000000000", "CapPrm": "0000000000000000", "CapEff": "0000000000000000",
		"CapBnd": "0000000000000000", "CapAmb": "0000000000000000",
		"NoNewPrivs": "1", "Seccomp": "2",
	}
	for k, v := range want {
		if status[k] != v {
			t.Errorf("QEMU %d: %s: %q, want %q", pid, k, status[k], v)
		}
	}
	if uid == 0 {
		t.Errorf("QEMU %d: the expected uid is 0", pid)
	}
	self, err1 := os.Readlink("/proc/self/ns/mnt")
	theirs, err2 := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/mnt")
	if err1 != nil || err2 != nil || self == theirs {
		t.Errorf("QEMU %d: mount namespace %q (%v), the test's %q (%v): want one of its own", pid, theirs, err2, self, err1)
	}
	if _, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid), "root", "etc", "passwd")); err == nil {
		t.Errorf("QEMU %d sees the host's /etc/passwd", pid)
	}
}
