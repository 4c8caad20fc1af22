package jail_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vmpod/vmpod/pkg/jail"
)

func TestAllocate(t *testing.T) {
	dir := t.TempDir()
	leases := filepath.Join(dir, "uids")
	r := jail.Range{First: 0x70000000, Count: 3}
	pod := func(name string) string {
		p := filepath.Join(dir, "pods", name)
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
		return p
	}
	a, b, c := pod("a"), pod("b"), pod("c")
	seen := map[uint32]string{}
	for _, owner := range []string{a, b, c} {
		uid, err := jail.Allocate(leases, r, owner)
		if err != nil {
			t.Fatal(err)
		}
		if uid < r.First || uid >= r.First+r.Count {
			t.Fatalf("uid %d outside %v", uid, r)
		}
		if other, ok := seen[uid]; ok {
			t.Fatalf("uid %d leased to %s and %s", uid, other, owner)
		}
		seen[uid] = owner
		if again, err := jail.Allocate(leases, r, owner); err != nil || again != uid {
			t.Fatalf("%s asked again: %d, %v; want its lease %d", owner, again, err, uid)
		}
	}
	if _, err := jail.Allocate(leases, r, pod("d")); err == nil {
		t.Fatal("a fourth pod got a uid from a range of 3")
	}
	// A released uid, and a lease whose pod dir is gone, go to new pods.
	var uidA, uidB uint32
	for uid, owner := range seen {
		switch owner {
		case a:
			uidA = uid
		case b:
			uidB = uid
		}
	}
	if err := jail.Release(leases, pod("e")); err != nil { // holds none: nothing freed
		t.Fatal(err)
	}
	if _, err := jail.Allocate(leases, r, pod("e")); err == nil {
		t.Fatal("another owner's release freed a uid")
	}
	if err := jail.Release(leases, a); err != nil {
		t.Fatal(err)
	}
	if uid, err := jail.Allocate(leases, r, pod("f")); err != nil || uid != uidA {
		t.Fatalf("after a's release: %d, %v; want %d", uid, err, uidA)
	}
	if err := os.RemoveAll(b); err != nil {
		t.Fatal(err)
	}
	if uid, err := jail.Allocate(leases, r, pod("g")); err != nil || uid != uidB {
		t.Fatalf("after b's dir went: %d, %v; want %d", uid, err, uidB)
	}
}

func TestParseRange(t *testing.T) {
	if r, err := jail.ParseRange("1879048192:65536"); err != nil || r != jail.DefaultRange {
		t.Fatalf("%v, %v", r, err)
	}
	for _, bad := range []string{"", "1879048192", "0:10", "10:0", "4294967290:10", "a:b", "-1:5"} {
		if _, err := jail.ParseRange(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// runAs starts sleep as uid, as an orphaned QEMU of that uid would run,
// and returns its process, killed and reaped at the test's end.
func runAs(t *testing.T, uid uint32) *exec.Cmd {
	t.Helper()
	if os.Getuid() != 0 {
		t.Fatal("running a process as another uid needs root: run the tests as root, as make test does")
	}
	cmd := exec.Command("sleep", "300")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
	})
	return cmd
}

// alive tells whether pid still runs (a zombie does not).
func alive(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	return !strings.HasPrefix(rest, "Z") && !strings.HasPrefix(rest, "X")
}

// An orphan QEMU's uid is never handed to a new pod, leased or not.
func TestAllocateSkipsUIDInUse(t *testing.T) {
	dir := t.TempDir()
	leases := filepath.Join(dir, "uids")
	r := jail.Range{First: 0x70000000 + 4300, Count: 1}
	gone := filepath.Join(dir, "gone") // a pod whose dir went without a release
	if err := os.Mkdir(gone, 0o700); err != nil {
		t.Fatal(err)
	}
	if uid, err := jail.Allocate(leases, r, gone); err != nil || uid != r.First {
		t.Fatalf("%d, %v", uid, err)
	}
	orphan := runAs(t, r.First)
	if err := os.Remove(gone); err != nil {
		t.Fatal(err)
	}
	newPod := filepath.Join(dir, "new")
	if err := os.Mkdir(newPod, 0o700); err != nil {
		t.Fatal(err)
	}
	if uid, err := jail.Allocate(leases, r, newPod); err == nil {
		t.Fatalf("uid %d handed over while process %d runs as it", uid, orphan.Process.Pid)
	} else if !strings.Contains(err.Error(), "still run a process") {
		t.Fatalf("error %q does not say a process runs as the uid", err)
	}
	// Once the orphan is gone, the stale lease is taken over.
	orphan.Process.Kill()
	for i := 0; alive(orphan.Process.Pid) && i < 500; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if uid, err := jail.Allocate(leases, r, newPod); err != nil || uid != r.First {
		t.Fatalf("after the orphan went: %d, %v", uid, err)
	}
}

// Release and KillOrphans kill what still runs as the owner's uid, and
// leave other uids' processes alone.
func TestReleaseKillsOrphans(t *testing.T) {
	dir := t.TempDir()
	leases := filepath.Join(dir, "uids")
	r := jail.Range{First: 0x70000000 + 4400, Count: 2}
	pods := []string{filepath.Join(dir, "a"), filepath.Join(dir, "b")}
	uids := map[string]uint32{}
	for _, p := range pods {
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
		uid, err := jail.Allocate(leases, r, p)
		if err != nil {
			t.Fatal(err)
		}
		uids[p] = uid
	}
	a, b := runAs(t, uids[pods[0]]), runAs(t, uids[pods[1]])
	if err := jail.KillOrphans(leases, pods[0]); err != nil {
		t.Fatal(err)
	}
	if alive(a.Process.Pid) {
		t.Fatalf("KillOrphans left process %d of uid %d", a.Process.Pid, uids[pods[0]])
	}
	if !alive(b.Process.Pid) {
		t.Fatalf("KillOrphans of %s killed another pod's process", pods[0])
	}
	if _, err := os.Stat(filepath.Join(leases, strconv.Itoa(int(uids[pods[0]])))); err != nil {
		t.Fatalf("KillOrphans dropped the lease: %v", err)
	}
	if err := jail.Release(leases, pods[1]); err != nil {
		t.Fatal(err)
	}
	if alive(b.Process.Pid) {
		t.Fatalf("Release left process %d of uid %d", b.Process.Pid, uids[pods[1]])
	}
	if _, err := os.Stat(filepath.Join(leases, strconv.Itoa(int(uids[pods[1]])))); !os.IsNotExist(err) {
		t.Fatalf("lease after Release: %v", err)
	}
}
