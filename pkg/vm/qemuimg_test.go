package vm

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/vmpod/vmpod/internal/testguest"
)

// TestQemuImgJailed: qemu-img, which parses the pod author's disk before
// QEMU runs, runs in the jail of the pod's QEMU (issue 28, item 6): the
// pod's uid, no capability, no_new_privs, the jailer's seccomp filter, a
// mount namespace showing it the disk (or the overlay it makes) and none
// of the host's files.
func TestQemuImgJailed(t *testing.T) {
	// The real qemu-img, caught while it opens a disk that is a FIFO: it
	// blocks in open(2) until a writer comes, long enough to read its
	// /proc/<pid>/status.
	t.Run("real qemu-img info", func(t *testing.T) {
		q := testQemuImg(t)
		disk := filepath.Join(t.TempDir(), "disk.qcow2")
		if err := unix.Mkfifo(disk, 0o644); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		errc := make(chan error, 1)
		go func() {
			_, err := inspectDisk(ctx, q, disk, "qcow2")
			errc <- err
		}()
		// The runtime reads the magic through the FIFO first...
		w, err := os.OpenFile(disk, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(qcow2Magic); err != nil {
			t.Fatal(err)
		}
		w.Close()
		// ...then qemu-img opens it and waits for a writer, until killed.
		pid := findProcess(t, "qemu-img", disk)
		testguest.AssertJailed(t, pid, q.Jail.UID)
		cancel()
		if err := <-errc; err == nil {
			t.Error("inspectDisk of a FIFO passed")
		}
	})

	// The real qemu-img makes the overlay as the pod's uid.
	t.Run("real qemu-img create", func(t *testing.T) {
		q := testQemuImg(t)
		disk := filepath.Join(t.TempDir(), "disk.qcow2")
		qemuImg(t, "create", "-q", "-f", "qcow2", disk, "1M")
		if err := os.MkdirAll(q.Layout.VMDir(), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := createOverlay(context.Background(), q, disk, "qcow2", 1<<20, q.Layout.Overlay()); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Lstat(q.Layout.Overlay())
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != q.Jail.UID || st.Gid != q.Jail.GID || !fi.Mode().IsRegular() {
			t.Errorf("overlay %s, owned by %d:%d, want a file of the pod's %d:%d", fi.Mode(), st.Uid, st.Gid, q.Jail.UID, q.Jail.GID)
		}
	})

	// A qemu-img of the test's on PATH reports what it is and sees.
	t.Run("what qemu-img sees", func(t *testing.T) {
		q := testQemuImg(t)
		dir := t.TempDir()
		disk, host := filepath.Join(dir, "rootfs", "disk", "disk.raw"), filepath.Join(dir, "host-secret")
		overlay, other := q.Layout.Overlay(), filepath.Join(q.Layout.VMDir(), "cidata.iso")
		mkdirs(t, filepath.Dir(disk), q.Layout.VMDir())
		for _, f := range []string{disk, host, other} {
			if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		fakeQemuImg(t, disk, host, overlay, other)

		_, err := inspectDisk(context.Background(), q, disk, "raw")
		if !errdefs.IsInvalidArgument(err) {
			t.Fatalf("inspectDisk = %v, want the fake's refusal", err)
		}
		assertSeen(t, "info", err, q.Jail.UID, map[string]string{
			disk: "reads", host: "hidden", overlay: "hidden", other: "hidden", "/etc/passwd": "hidden"})

		err = createOverlay(context.Background(), q, disk, "raw", 1, overlay)
		if !errdefs.IsInternal(err) {
			t.Fatalf("createOverlay = %v, want the fake's failure", err)
		}
		assertSeen(t, "create", err, q.Jail.UID, map[string]string{
			overlay: "writes", disk: "hidden", host: "hidden", other: "hidden", "/etc/passwd": "hidden"})
	})
}

// findProcess waits for a process named comm whose command line mentions
// arg.
func findProcess(t *testing.T, comm, arg string) int {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		procs, _ := filepath.Glob("/proc/[0-9]*")
		for _, p := range procs {
			c, err1 := os.ReadFile(filepath.Join(p, "comm"))
			cmdline, err2 := os.ReadFile(filepath.Join(p, "cmdline"))
			if err1 == nil && err2 == nil && strings.TrimSpace(string(c)) == comm && strings.Contains(string(cmdline), arg) {
				pid, _ := strconv.Atoi(filepath.Base(p))
				return pid
			}
		}
	}
	t.Fatalf("no %s process with %s in its command line", comm, arg)
	return 0
}

// fakeQemuImg puts first on PATH a qemu-img that reports on stderr its
// credentials and which of files it can read or write, then fails. It
// uses shell builtins only: its seccomp filter lets it start no process.
func fakeQemuImg(t *testing.T, files ...string) {
	t.Helper()
	bin := t.TempDir()
	script := `#!/bin/sh
exec 1>&2
echo fake qemu-img
while IFS= read -r l; do
	case "$l" in Uid:*|Gid:*|Groups:*|Cap*|NoNewPrivs:*|Seccomp:*) echo "$l";; esac
done </proc/self/status
for f in /etc/passwd ` + strings.Join(files, " ") + `; do
	if true >>"$f" 2>/dev/null; then echo "$f: writes"
	elif true <"$f" 2>/dev/null; then echo "$f: reads"
	else echo "$f: hidden"; fi
done
echo end
exit 1
`
	if err := os.WriteFile(filepath.Join(bin, "qemu-img"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
}

// assertSeen checks the fake's report in err: it ran as uid with no
// capability, no_new_privs and a seccomp filter, and saw files as want
// says.
func assertSeen(t *testing.T, what string, err error, uid uint32, want map[string]string) {
	t.Helper()
	got := map[string]string{}
	for _, line := range strings.Split(err.Error(), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			got[k] = strings.TrimSpace(v)
		}
	}
	id := strconv.FormatUint(uint64(uid), 10)
	ids := strings.Repeat(id+"\t", 3) + id
	for k, v := range map[string]string{"Uid": ids, "Gid": ids, "Groups": "",
		"CapInh": "0000000000000000", "CapPrm": "0000000000000000", "CapEff": "0000000000000000",
		"CapBnd": "0000000000000000", "CapAmb": "0000000000000000", "NoNewPrivs": "1", "Seccomp": "2"} {
		if got[k] != v {
			t.Errorf("%s: %s: %q, want %q", what, k, got[k], v)
		}
	}
	for f, v := range want {
		if got[f] != v {
			t.Errorf("%s: %s: %q, want %q", what, f, got[f], v)
		}
	}
	if t.Failed() {
		t.Logf("%s: %v", what, err)
	}
}
