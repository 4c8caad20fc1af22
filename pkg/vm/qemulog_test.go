package vm_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vmpod/vmpod/pkg/vm"
)

// TestQEMULogCap: QEMU's stderr log (libvirt's log/qemu/<name>.log) is
// held open by QEMU for appending, and kept under vm.MaxQEMULogBytes
// while QEMU runs: 1 MiB appended to it, as a QEMU flooding its stderr
// would, leaves the log's head (libvirt's start lines), a line saying
// what went, and no more than the cap.
func TestQEMULogCap(t *testing.T) {
	const maxBytes = 64 << 10
	defer func(old int64) { vm.MaxQEMULogBytes = old }(vm.MaxQEMULogBytes)
	vm.MaxQEMULogBytes = maxBytes
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	g := startGuest(ctx, t, "boot-pod.yaml", nil)
	logPath := filepath.Join(g.jail.LibvirtRoot, "log", "qemu", g.name+".log")

	// QEMU's stderr is the log, opened for appending: a cut leaves no
	// hole before QEMU's next line.
	fd2 := fmt.Sprintf("/proc/%d/fd/2", g.pid)
	if target, err := os.Readlink(fd2); err != nil || target != logPath {
		t.Fatalf("QEMU's stderr is %q (%v), want %s", target, err, logPath)
	}
	info, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/2", g.pid))
	if err != nil {
		t.Fatal(err)
	}
	if flags := fdinfoFlags(t, string(info)); flags&unix.O_APPEND == 0 {
		t.Fatalf("QEMU's stderr is not open for appending (flags %o): cutting its log would leave a hole", flags)
	}
	head, err := os.ReadFile(logPath)
	if err != nil || len(head) == 0 {
		t.Fatalf("QEMU's log: %d bytes, %v", len(head), err)
	}

	f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	line := bytes.Repeat([]byte("qemu-system-x86_64: flood\n"), 160) // about 4 KiB
	written := 0
	for written < 1<<20 {
		n, err := f.Write(line)
		if err != nil {
			t.Fatal(err)
		}
		written += n
	}
	f.Close()
	var size int64
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		fi, err := os.Stat(logPath)
		if err != nil {
			t.Fatal(err)
		}
		if size = fi.Size(); size <= maxBytes {
			break
		}
	}
	if size > maxBytes {
		t.Fatalf("QEMU's log is %d bytes after %d were appended, past its cap of %d", size, written, maxBytes)
	}
	got, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	keep := head
	if len(keep) > maxBytes/2 {
		keep = keep[:maxBytes/2]
	}
	if !bytes.HasPrefix(got, keep) {
		t.Errorf("the cut lost the log's head (libvirt's start lines):\n%.400s", got)
	}
	if !strings.Contains(string(got), "[vmpod: QEMU's log passed "+strconv.Itoa(maxBytes)+" bytes") {
		t.Errorf("no line saying what the cut dropped:\n...%s", got[max(0, len(got)-400):])
	}
	t.Logf("%d bytes appended: the log is %d bytes under a cap of %d", written, size, maxBytes)
}

// fdinfoFlags reads the octal flags line of a /proc/PID/fdinfo/N.
func fdinfoFlags(t *testing.T, info string) int {
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(l, "flags:"); ok {
			f, err := strconv.ParseInt(strings.TrimSpace(v), 8, 64)
			if err != nil {
				t.Fatal(err)
			}
			return int(f)
		}
	}
	t.Fatalf("no flags in fdinfo:\n%s", info)
	return 0
}
