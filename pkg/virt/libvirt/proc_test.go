package libvirt

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// processAlive reports whether pid runs; a zombie does not count, as
// nothing here is its parent that would reap it.
func processAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}

func waitProcessGone(pid int, timeout time.Duration) bool {
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if !processAlive(pid) {
			return true
		}
	}
	return !processAlive(pid)
}

// domainCgroupDirs returns the cgroup dirs, one per hierarchy, holding the
// QEMU process pid, as read from /proc/<pid>/cgroup: the ground truth the
// test checks Destroy against, independent of the sweeper's globs.
func domainCgroupDirs(t *testing.T, pid int, root string) []string {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	prefix := machinePrefix(root)
	var dirs []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		parts := strings.SplitN(s.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		mount := "/sys/fs/cgroup/" + strings.TrimPrefix(parts[1], "name=")
		if parts[1] == "" {
			mount = "/sys/fs/cgroup/unified" // the hybrid layout of this machine
			if _, err := os.Stat(mount); err != nil {
				mount = "/sys/fs/cgroup"
			}
		}
		var kept []string
		for _, elem := range strings.Split(parts[2], "/") {
			kept = append(kept, elem)
			if strings.HasPrefix(elem, prefix) {
				dirs = append(dirs, filepath.Join(mount, strings.Join(kept, "/")))
				break
			}
		}
	}
	if len(dirs) == 0 {
		t.Fatalf("QEMU %d is in no cgroup named %s*", pid, prefix)
	}
	return dirs
}

// memoryLimit reads the memory cgroup limit among dirs.
func memoryLimit(t *testing.T, dirs []string) uint64 {
	t.Helper()
	for _, d := range dirs {
		for _, file := range []string{"memory.limit_in_bytes", "memory.max"} {
			b, err := os.ReadFile(filepath.Join(d, file))
			if err != nil {
				continue
			}
			v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
			if err != nil {
				t.Fatalf("%s/%s: %v", d, file, err)
			}
			return v
		}
	}
	t.Fatalf("no memory cgroup among %v", dirs)
	return 0
}

// reapRoot kills QEMU processes left running from root by a failed test
// and removes their cgroups. It touches only processes whose pidfile is in
// root and whose command line names root: the ones this test started.
func reapRoot(t *testing.T, root string) {
	pidfiles, _ := filepath.Glob(filepath.Join(root, "run", "qemu", "*.pid"))
	for _, pf := range pidfiles {
		if filepath.Base(pf) == "driver.pid" { // the helper process itself
			continue
		}
		b, err := os.ReadFile(pf)
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || !processAlive(pid) {
			continue
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if !bytes.Contains(cmdline, []byte("qemu-system")) || !bytes.Contains(cmdline, []byte(root)) {
			continue
		}
		t.Logf("cleanup: killing QEMU %d left from %s", pid, root)
		_ = syscall.Kill(pid, syscall.SIGKILL)
		waitProcessGone(pid, 10*time.Second)
	}
	// A killed QEMU's threads leave its cgroups a moment after it is gone.
	for i := 0; i < 50 && len(leftoverCgroups(root)) > 0; i++ {
		for _, dir := range leftoverCgroups(root) {
			removeCgroupTree(dir)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// requireQEMUUser fails early with the fix when the host lacks the user and
// group Debian's libvirt is built with: as root, libvirt resolves them
// before it reads qemu.conf (see connectError), even though QEMU then runs
// as root. hack/install-deps.sh creates them.
func requireQEMUUser(t *testing.T) {
	t.Helper()
	const name = "libvirt-qemu"
	if _, err := user.Lookup(name); err != nil {
		t.Fatalf("user %s: %v: run hack/install-deps.sh", name, err)
	}
	if _, err := user.LookupGroup(name); err != nil {
		t.Fatalf("group %s: %v: run hack/install-deps.sh", name, err)
	}
}
