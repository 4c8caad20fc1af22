package podcgroup

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("needs root (cgroups)")
	}
}

// podCgroup makes a pod-level cgroup (as the kubelet would) with a memory
// limit and returns its dir; it is removed, bottom-up, at cleanup.
func podCgroup(t *testing.T, memLimit uint64) string {
	t.Helper()
	dir := fmt.Sprintf("/vmpod-test-%d/pod-%d", os.Getpid(), time.Now().UnixNano())
	res := Limits{MemoryBytes: memLimit}.resources()
	var err error
	if Unified() {
		_, err = cgroup2.NewManager(Root, dir, cgroup2.ToResources(res))
	} else {
		_, err = cgroup1.New(cgroup1.StaticPath(dir), res)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, d := range []string{dir, filepath.Dir(dir)} {
			if err := Remove(Path{Raw: d, Driver: Cgroupfs, Dir: d}); err != nil {
				t.Errorf("remove %s: %v", d, err)
			}
		}
	})
	return dir
}

// sleeper starts a process that lives until cleanup.
func sleeper(t *testing.T) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

func cgroupOf(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func ptr[T any](v T) *T { return &v }

// TestCgroupfsDriver: a VM cgroup under the pod's with a memory limit and
// CPU quota, stats, a live CPU update, OOM detection and removal, on
// whichever cgroup version this node runs.
func TestCgroupfsDriver(t *testing.T) {
	requireRoot(t)
	pod := podCgroup(t, 256<<20)
	if got := MemoryLimit(pod); got != 256<<20 {
		t.Fatalf("pod memory limit = %d, want %d", got, 256<<20)
	}
	p, err := Parse(pod + "/vm")
	if err != nil {
		t.Fatal(err)
	}
	testDriver(t, p)
}

func testDriver(t *testing.T, p Path) {
	proc := sleeper(t)
	limits := Limits{MemoryBytes: 96 << 20, CPU: &specs.LinuxCPU{Shares: ptr(uint64(512)), Quota: ptr(int64(150000)), Period: ptr(uint64(100000))}}
	cg, err := Enter(p, proc.Process.Pid, limits)
	if err != nil {
		t.Fatal(err)
	}
	if got := cgroupOf(t, proc.Process.Pid); !strings.Contains(got, p.Dir+"\n") {
		t.Fatalf("process cgroups:\n%s\nwant %s", got, p.Dir)
	}
	if got := MemoryLimit(p.Dir); got != 96<<20 {
		t.Errorf("memory limit = %d, want %d", got, 96<<20)
	}
	if got := cpuMax(t, p.Dir); got != "150000 100000" {
		t.Errorf("CPU quota = %q, want 150000 100000", got)
	}
	if _, err := cg.Stats(); err != nil {
		t.Error(err)
	}
	if err := cg.UpdateCPU(&specs.LinuxCPU{Quota: ptr(int64(50000)), Period: ptr(uint64(100000))}); err != nil {
		t.Fatal(err)
	}
	if got := cpuMax(t, p.Dir); got != "50000 100000" {
		t.Errorf("CPU quota after update = %q, want 50000 100000", got)
	}
	// A live resize moves the memory limit both ways.
	for _, b := range []uint64{128 << 20, 64 << 20, 96 << 20} {
		if err := cg.UpdateMemory(b); err != nil {
			t.Fatal(err)
		}
		if got := MemoryLimit(p.Dir); got != b {
			t.Errorf("memory limit after UpdateMemory(%d) = %d", b, got)
		}
	}
	if cg.OOMKilled() {
		t.Error("OOMKilled before any OOM")
	}

	// A process that grows past the limit is killed, and OOMKilled says so.
	hog := exec.Command("tail", "/dev/zero")
	if err := hog.Start(); err != nil {
		t.Fatal(err)
	}
	if err := enterMore(p, hog.Process.Pid); err != nil {
		_ = hog.Process.Kill()
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- hog.Wait() }()
	select {
	case err := <-waited:
		if err == nil {
			t.Fatal("the memory hog exited cleanly")
		}
	case <-time.After(60 * time.Second):
		_ = hog.Process.Kill()
		t.Fatal("the memory hog was not OOM-killed in 60s")
	}
	if !cg.OOMKilled() {
		t.Error("OOMKilled = false after an OOM kill")
	}

	_ = proc.Process.Kill()
	_ = proc.Wait()
	if err := cg.Delete(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(hierarchyDir(p.Dir, "memory")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cgroup %s still there after Delete: %v", p.Dir, err)
	}
}

// enterMore moves another process into the cgroup at p.
func enterMore(p Path, pid int) error {
	return os.WriteFile(filepath.Join(hierarchyDir(p.Dir, "memory"), "cgroup.procs"), []byte(fmt.Sprint(pid)), 0)
}

// hierarchyDir is dir in the v2 hierarchy, or in the v1 controller's.
func hierarchyDir(dir, controller string) string {
	if Unified() {
		return filepath.Join(Root, dir)
	}
	return filepath.Join(Root, controller, dir)
}

// cpuMax reads the CPU quota and period as v2's cpu.max spells them.
func cpuMax(t *testing.T, dir string) string {
	t.Helper()
	if Unified() {
		b, err := os.ReadFile(filepath.Join(Root, dir, "cpu.max"))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	read := func(f string) string {
		b, err := os.ReadFile(filepath.Join(Root, "cpu", dir, f))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	return read("cpu.cfs_quota_us") + " " + read("cpu.cfs_period_us")
}
