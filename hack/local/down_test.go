// Package local tests hack/local-down.sh, which hack/local-up.sh also runs
// before it makes anything: with and without a record, it removes what an
// earlier local cluster left (network namespace, cgroups in every
// hierarchy, host mounts, files), checks each removal, and exits non-zero
// on what it could not or must not remove. Each test makes the leftovers
// by hand under a name of its own (never the real cluster's), and removes
// them itself when it ends, whatever local-down did. Run as root.
package local

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

var seq atomic.Int32

// leftovers is one simulated earlier cluster: a unique name and the
// directories local-down reads from the environment.
type leftovers struct {
	name                    string
	state, run, legacy, out string
}

func newLeftovers(t *testing.T) *leftovers {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("these tests make network namespaces and cgroups: run them as root")
	}
	dir := t.TempDir()
	l := &leftovers{
		name:   fmt.Sprintf("vmpodlt%d-%d", os.Getpid()%100000, seq.Add(1)),
		state:  filepath.Join(dir, "state"),
		run:    filepath.Join(dir, "run"),
		legacy: filepath.Join(dir, "legacy"),
		out:    filepath.Join(dir, "out"),
	}
	// Whatever local-down did, nothing of the test stays: unmount below
	// dir, delete the namespace, remove the cgroups.
	t.Cleanup(func() {
		for _, mp := range mountsUnder(dir) {
			_ = syscall.Unmount(mp, syscall.MNT_DETACH)
		}
		_ = exec.Command("ip", "netns", "delete", l.name).Run()
		_ = os.Remove(l.netns())
		for _, top := range l.cgroups() {
			removeTree(top)
		}
	})
	return l
}

func (l *leftovers) netns() string { return "/run/netns/" + l.name }

// cgroups is the leftover's cgroup in every hierarchy.
func (l *leftovers) cgroups() []string {
	var dirs []string
	for _, mp := range cgroupMounts() {
		dirs = append(dirs, filepath.Join(mp, l.name))
	}
	return dirs
}

// down runs hack/local-down.sh for the leftover and returns its output and
// exit code.
func (l *leftovers) down(t *testing.T) (string, int) {
	t.Helper()
	cmd := exec.Command("bash", "../local-down.sh")
	cmd.Env = append(os.Environ(), "VMPOD_LOCAL_NAME="+l.name, "VMPOD_LOCAL_STATE="+l.state,
		"VMPOD_LOCAL_RUN="+l.run, "VMPOD_LOCAL_LEGACY="+l.legacy, "VMPOD_LOCAL_OUT="+l.out)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	t.Logf("local-down (exit %d, %v):\n%s", code, time.Since(start).Round(10*time.Millisecond), out.String())
	return out.String(), code
}

// makeNetns makes the node's namespace as local-up does: a veth pair
// inside, no address outside.
func (l *leftovers) makeNetns(t *testing.T) {
	t.Helper()
	run(t, "ip", "netns", "add", l.name)
	run(t, "ip", "-n", l.name, "link", "add", "node0", "type", "veth", "peer", "name", "node1")
}

// makeCgroups makes the kubelet's tree below the leftover's cgroup root in
// every hierarchy, as a kubelet with pods leaves it.
func (l *leftovers) makeCgroups(t *testing.T) []string {
	t.Helper()
	var leaves []string
	for _, top := range l.cgroups() {
		leaf := filepath.Join(top, "kubepods", "besteffort", "pod1234", "ctr5678")
		if err := os.MkdirAll(leaf, 0o755); err != nil {
			t.Fatal(err)
		}
		leaves = append(leaves, leaf)
	}
	return leaves
}

// startIn starts sleep in the leftover's namespace and returns it; it is
// killed and reaped when the test ends.
func (l *leftovers) startIn(t *testing.T) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("nsenter", "--net="+l.netns(), "--", "sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	// nsenter execs sleep once it has joined the namespace.
	deadline := time.Now().Add(5 * time.Second)
	for !strings.HasSuffix(readlink(fmt.Sprintf("/proc/%d/exe", cmd.Process.Pid)), "/sleep") {
		if time.Now().After(deadline) {
			t.Fatal("sleep did not start in the namespace")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return cmd
}

// TestDownSweepsWithoutRecord: an earlier cluster whose record is gone
// (the old /tmp record, wiped) left its namespace with its veths, the
// kubelet's cgroups in every hierarchy, a mount of its runtime dir and
// files. local-down removes each and says so; a second run finds nothing.
func TestDownSweepsWithoutRecord(t *testing.T) {
	l := newLeftovers(t)
	l.makeNetns(t)
	leaves := l.makeCgroups(t)
	mnt := filepath.Join(l.run, "containerd", "state", "mnt")
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, "mount", "-t", "tmpfs", "tmpfs", mnt)
	for _, d := range []string{l.legacy, l.out} {
		if err := os.MkdirAll(filepath.Join(d, "logs"), 0o755); err != nil {
			t.Fatal(err)
		}
	}

	out, code := l.down(t)
	if code != 0 {
		t.Fatalf("local-down exit %d, want 0", code)
	}
	for _, want := range []string{
		"removed mount " + mnt,
		"removed network namespace " + l.name + " (and its veths node0 node1)",
		"removed cgroup " + l.cgroups()[0] + " (5 cgroup(s))",
		"removed " + l.run, "removed " + l.legacy, "removed " + l.out,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in local-down's output", want)
		}
	}
	l.assertGone(t, append(leaves, mnt)...)

	if out, code := l.down(t); code != 0 || !strings.Contains(out, "nothing left") {
		t.Errorf("second local-down: exit %d, want 0 and nothing left", code)
	}
}

// TestDownAfterReboot: /run is on disk here, so a reboot leaves
// /run/netns/NAME as a plain file ("Cannot create namespace file ... File
// exists" from the next `ip netns add`) and the record of the earlier boot,
// whose PIDs mean nothing now. local-down removes the file, does not touch
// the recorded PID, and `ip netns add` works again.
func TestDownAfterReboot(t *testing.T) {
	l := newLeftovers(t)
	if err := os.WriteFile(l.netns(), nil, 0o444); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("ip", "netns", "add", l.name).CombinedOutput(); err == nil || !strings.Contains(string(out), "File exists") {
		t.Fatalf("ip netns add over the leftover file: %v %s; want File exists", err, out)
	}
	// The test's own PID, as the record of an earlier boot would have a
	// PID that runs again now.
	mountpoint := filepath.Join(l.state, "..", "var-lib-kubelet")
	if err := os.MkdirAll(mountpoint, 0o755); err != nil {
		t.Fatal(err)
	}
	writeRecord(t, l.state, "00000000-0000-0000-0000-000000000000",
		fmt.Sprintf("etcd %d %s\n", os.Getpid(), starttime(t, os.Getpid())),
		"netns "+l.name+"\nmountpoint "+mountpoint+"\n")

	out, code := l.down(t)
	if code != 0 {
		t.Fatalf("local-down exit %d, want 0", code)
	}
	if !strings.Contains(out, "from an earlier boot") || !strings.Contains(out, "left by a reboot") {
		t.Errorf("local-down does not say it found an earlier boot's record and namespace file")
	}
	l.assertGone(t, mountpoint, l.state)
	run(t, "ip", "netns", "add", l.name)
}

// TestDownStopsRecordedProcess: a process the record names (PID and start
// time match) is stopped, then the cgroup it was in and the namespace it
// used are removed.
func TestDownStopsRecordedProcess(t *testing.T) {
	l := newLeftovers(t)
	l.makeNetns(t)
	leaves := l.makeCgroups(t)
	cmd := l.startIn(t)
	pid := cmd.Process.Pid
	// Into the leftover cgroup of each hierarchy that takes a task
	// without settings (cpuset wants CPUs and memory nodes first).
	moved := 0
	for _, leaf := range leaves {
		if os.WriteFile(filepath.Join(leaf, "cgroup.procs"), []byte(fmt.Sprint(pid)), 0o644) == nil {
			moved++
		}
	}
	if moved == 0 {
		t.Fatal("could not put the process in any of the leftover cgroups")
	}
	var made strings.Builder
	made.WriteString("netns " + l.name + "\n")
	for _, c := range l.cgroups() {
		made.WriteString("cgroup " + c + "\n")
	}
	writeRecord(t, l.state, bootID(t), fmt.Sprintf("etcd %d %s\n", pid, starttime(t, pid)), made.String())

	out, code := l.down(t)
	if code != 0 {
		t.Fatalf("local-down exit %d, want 0", code)
	}
	if !strings.Contains(out, fmt.Sprintf("stopping etcd (pid %d)", pid)) {
		t.Errorf("local-down does not say it stopped the recorded process")
	}
	if running(pid) {
		t.Errorf("the recorded process %d still runs", pid)
	}
	l.assertGone(t, append(leaves, l.state)...)
}

// TestDownLeavesUnrecordedProcess: a process in the namespace that no
// record names is not killed (it may be a running cluster whose record was
// lost); local-down names it, removes nothing of the cluster (namespace,
// cgroups, runtime dir) and exits 1.
func TestDownLeavesUnrecordedProcess(t *testing.T) {
	l := newLeftovers(t)
	l.makeNetns(t)
	leaves := l.makeCgroups(t)
	if err := os.MkdirAll(l.run, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := l.startIn(t)
	pid := cmd.Process.Pid

	out, code := l.down(t)
	if code == 0 {
		t.Errorf("local-down exit 0 with a process it must not kill in the namespace")
	}
	if !strings.Contains(out, fmt.Sprintf("%d (sleep): in network namespace %s", pid, l.name)) {
		t.Errorf("local-down does not name the process %d", pid)
	}
	if strings.Contains(out, "removed network namespace") {
		t.Errorf("local-down says it removed the namespace a process uses")
	}
	if !running(pid) {
		t.Errorf("local-down killed the unrecorded process %d", pid)
	}
	for _, p := range append([]string{l.netns(), l.run}, leaves...) {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("local-down removed a part of the running cluster: %v", err)
		}
	}
}

func (l *leftovers) assertGone(t *testing.T, extra ...string) {
	t.Helper()
	for _, p := range append(append([]string{l.netns(), l.run, l.legacy, l.out}, l.cgroups()...), extra...) {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s is still there after local-down", p)
		}
	}
	if m := mountsUnder(filepath.Dir(l.state)); len(m) > 0 {
		t.Errorf("still mounted after local-down: %v", m)
	}
}

func writeRecord(t *testing.T, state, bootID, pids, made string) {
	t.Helper()
	if err := os.MkdirAll(state, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{"boot_id": bootID + "\n", "pids": pids, "made": made} {
		if err := os.WriteFile(filepath.Join(state, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func bootID(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// starttime is field 22 of /proc/PID/stat.
func starttime(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	return strings.Fields(s[strings.LastIndex(s, ")")+2:])[19]
}

// running: pid exists and is not a zombie.
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	return strings.Fields(s[strings.LastIndex(s, ")")+2:])[0] != "Z"
}

func readlink(p string) string {
	s, _ := os.Readlink(p)
	return s
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// mountInfo is the mount points of this mount namespace.
func mountInfo() []string {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	var mps []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 {
			mps = append(mps, f[4])
		}
	}
	return mps
}

// mountsUnder lists the mount points below dir, deepest first.
func mountsUnder(dir string) []string {
	var found []string
	all := mountInfo()
	for i := len(all) - 1; i >= 0; i-- {
		if strings.HasPrefix(all[i], dir+"/") {
			found = append(found, all[i])
		}
	}
	return found
}

// cgroupMounts lists the mount point of every cgroup hierarchy.
func cgroupMounts() []string {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	var mps []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		for i, x := range f {
			if x == "-" && i+1 < len(f) && (f[i+1] == "cgroup" || f[i+1] == "cgroup2") {
				mps = append(mps, f[4])
				break
			}
		}
	}
	return mps
}

// removeTree removes a cgroup tree bottom-up.
func removeTree(top string) {
	var dirs []string
	_ = filepath.WalkDir(top, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		_ = os.Remove(dirs[i])
	}
}

// TestDownDetachesStackedLoops: a block PersistentVolume's loop device
// (local-up's, over an image in $STATE/disks) with a loop device on top of
// it, as the kubelet adds while a pod maps the PV and leaves when it is
// stopped first. local-down detaches the top one, then the PV's; a second
// run finds nothing.
func TestDownDetachesStackedLoops(t *testing.T) {
	l := newLeftovers(t)
	img := filepath.Join(l.state, "disks", "pv-"+l.name+"-0.img")
	if err := os.MkdirAll(filepath.Dir(img), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(img, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 4<<20); err != nil {
		t.Fatal(err)
	}
	attach := func(file string) string {
		out, err := exec.Command("losetup", "--find", "--show", file).CombinedOutput()
		if err != nil {
			t.Fatalf("losetup --find --show %s: %v: %s", file, err, out)
		}
		dev := strings.TrimSpace(string(out))
		t.Cleanup(func() { _ = exec.Command("losetup", "-d", dev).Run() })
		return dev
	}
	pv := attach(img)
	top := attach(pv)

	out, code := l.down(t)
	if code != 0 {
		t.Fatalf("local-down exit %d, want 0", code)
	}
	for _, want := range []string{"removed loop device " + top + " of " + pv, "removed loop device " + pv + " of " + img} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in local-down's output", want)
		}
	}
	for _, f := range []string{img, pv} {
		if out, _ := exec.Command("losetup", "-j", f).Output(); len(out) > 0 {
			t.Errorf("a loop device is still bound to %s: %s", f, out)
		}
	}
	if out, code := l.down(t); code != 0 || !strings.Contains(out, "nothing left") {
		t.Errorf("second local-down: exit %d, want 0 and nothing left", code)
	}
}
