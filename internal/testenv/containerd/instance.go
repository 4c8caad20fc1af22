package containerd

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// rootPrefix names every harness root: /tmp/vctd-NNNN. The same name is the
// node's network namespace and the cgroup parent.
const rootPrefix = "vctd-"

// instance is what one harness made on the host. It is saved as
// <root>/instance.json, so that a later Start can clean up after a test
// binary that died without running its cleanups (a -timeout panic, a kill).
type instance struct {
	Root         string
	NetNS        string // name under /run/netns
	CgroupParent string
	Cgroups      []string // directories made under each hierarchy
	OwnerPID     int
	OwnerStart   uint64
	HolderPID    int
	HolderStart  uint64
	MntIno       uint64 // the holder's mount namespace
	MntDev       uint64

	holder     *exec.Cmd
	holderGone chan struct{}
}

func (in *instance) save() error {
	b, err := json.MarshalIndent(in, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(in.Root, ".instance.json.tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(in.Root, "instance.json"))
}

// claim records the test process as the owner.
func (in *instance) claim() error {
	in.OwnerPID = os.Getpid()
	st, err := startTime(in.OwnerPID)
	if err != nil {
		return err
	}
	in.OwnerStart = st
	return in.save()
}

// setupNetNS makes the node's network namespace: loopback up, and a veth
// pair with both ends inside carrying NodeIP and NodePeerIP.
func (in *instance) setupNetNS() error {
	if out, err := exec.Command("ip", "netns", "add", in.NetNS).CombinedOutput(); err != nil {
		return fmt.Errorf("ip netns add %s: %v: %s", in.NetNS, err, out)
	}
	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		{"link", "add", nodeLink, "type", "veth", "peer", "name", nodePeerLink},
		{"addr", "add", NodeIP + nodePrefix, "dev", nodeLink},
		{"addr", "add", NodePeerIP + nodePrefix, "dev", nodePeerLink},
		{"link", "set", nodeLink, "up"},
		{"link", "set", nodePeerLink, "up"},
	} {
		full := append([]string{"-n", in.NetNS}, args...)
		if out, err := exec.Command("ip", full...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(full, " "), err, out)
		}
	}
	return nil
}

// setupCgroups makes CgroupParent in every mounted cgroup hierarchy (v1
// controllers, name=systemd, and the v2 one), as a kubelet's cgroupRoot
// needs; cpuset gets its parent's CPUs and memory nodes.
func (in *instance) setupCgroups() error {
	mounts, err := cgroupMounts()
	if err != nil {
		return err
	}
	for _, mp := range mounts {
		dir := filepath.Join(mp, in.CgroupParent)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return fmt.Errorf("cgroup: %w", err)
		}
		in.Cgroups = append(in.Cgroups, dir)
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			b, err := os.ReadFile(filepath.Join(mp, f))
			if err != nil {
				continue // not the cpuset hierarchy
			}
			if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
				return fmt.Errorf("cgroup %s: %w", f, err)
			}
		}
	}
	return in.save()
}

func cgroupMounts() ([]string, error) {
	mi, err := readMountinfo()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range mi {
		if m.fstype == "cgroup" || m.fstype == "cgroup2" {
			out = append(out, m.point)
		}
	}
	return out, nil
}

// startHolder starts the process that keeps the node's private mount
// namespace: `nsenter --net=NETNS unshare --mount --propagation private
// sleep infinity`. containerd, Restart's new containerd and Command all
// enter its namespaces, so the pod netns mounts, rootfs mounts and shims of
// one containerd run are there for the next.
func (in *instance) startHolder() error {
	cmd := exec.Command("nsenter", "--net="+filepath.Join("/run/netns", in.NetNS), "--",
		"unshare", "--mount", "--propagation", "private", "--", "sleep", "infinity")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start namespace holder: %w", err)
	}
	in.holder = cmd
	in.holderGone = make(chan struct{})
	go func() { cmd.Wait(); close(in.holderGone) }()
	pid := cmd.Process.Pid
	in.HolderPID = pid
	self, err := nsID("self", "mnt")
	if err != nil {
		return err
	}
	// unshare execs sleep once the namespace exists: wait for that, bounded.
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-in.holderGone:
			return fmt.Errorf("namespace holder exited: %v", cmd.ProcessState)
		default:
		}
		id, err := nsID(strconv.Itoa(pid), "mnt")
		if err == nil && id != self {
			if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); filepath.Base(exe) == "sleep" {
				in.MntIno, in.MntDev = id.ino, id.dev
				break
			}
		}
		if time.Now().After(deadline) {
			return errors.New("namespace holder did not enter its mount namespace within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if in.HolderStart, err = startTime(pid); err != nil {
		return err
	}
	if err := in.save(); err != nil {
		return err
	}
	// libcni keeps its cache in /var/lib/cni whatever containerd's
	// config says: give it the root's directory, in this namespace only.
	// The mount point itself must exist on the host (libcni would have
	// made it anyway).
	cache := filepath.Join(in.Root, "cni", "cache")
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return err
	}
	if err := os.MkdirAll(cniCacheDir, 0o755); err != nil {
		return err
	}
	out, err := exec.Command("nsenter", "--target", strconv.Itoa(pid), "--mount", "--",
		"mount", "--bind", cache, cniCacheDir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("bind %s over %s: %v: %s", cache, cniCacheDir, err, out)
	}
	return nil
}

// cniCacheDir is libcni's fixed cache directory.
const cniCacheDir = "/var/lib/cni"

type nsIdent struct{ ino, dev uint64 }

func nsID(pid, ns string) (nsIdent, error) {
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/"+pid+"/ns/"+ns, &st); err != nil {
		return nsIdent{}, err
	}
	return nsIdent{ino: st.Ino, dev: st.Dev}, nil
}

// startTime is field 22 of /proc/PID/stat, to tell a PID from its reuse.
func startTime(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	return strconv.ParseUint(f[19], 10, 64)
}

func procState(pid int) byte {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return 0
	}
	return s[i+2]
}

// alive reports whether pid is the process that started at start.
func alive(pid int, start uint64) bool {
	if pid <= 0 {
		return false
	}
	st, err := startTime(pid)
	return err == nil && st == start && procState(pid) != 'Z'
}

// ours reports whether pid belongs to this instance: in the holder's mount
// namespace (only while the holder lives, so the namespace's inode number
// cannot have been reused), or naming the root in its command line
// (containerd's --config, every shim's -address and -bundle), or in a
// cgroup under CgroupParent (runc containers, QEMU). Zombies are not.
func (in *instance) ours(pid int, useMnt bool) bool {
	if pid == os.Getpid() || pid == in.HolderPID || procState(pid) == 'Z' {
		return false
	}
	p := strconv.Itoa(pid)
	if useMnt && in.MntIno != 0 {
		if id, err := nsID(p, "mnt"); err == nil && id.ino == in.MntIno && id.dev == in.MntDev {
			return true
		}
	}
	if b, err := os.ReadFile("/proc/" + p + "/cmdline"); err == nil {
		for _, arg := range strings.Split(string(b), "\x00") {
			if arg == in.Root || strings.Contains(arg, in.Root+"/") {
				return true
			}
		}
	}
	if b, err := os.ReadFile("/proc/" + p + "/cgroup"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			parts := strings.SplitN(line, ":", 3)
			if len(parts) == 3 && (parts[2] == in.CgroupParent || strings.HasPrefix(parts[2], in.CgroupParent+"/")) {
				return true
			}
		}
	}
	return false
}

func (in *instance) procs(useMnt bool) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if in.ours(pid, useMnt) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// killAll SIGKILLs the instance's processes until none is left, bounded.
// Each is re-checked after os.FindProcess has pinned it (a pidfd), so a
// reused PID is never signalled.
func (in *instance) killAll(useMnt bool, bound time.Duration) []int {
	deadline := time.Now().Add(bound)
	for {
		pids := in.procs(useMnt)
		if len(pids) == 0 || time.Now().After(deadline) {
			return pids
		}
		for _, pid := range pids {
			p, err := os.FindProcess(pid)
			if err != nil {
				continue
			}
			if in.ours(pid, useMnt) {
				p.Signal(syscall.SIGKILL)
			}
			p.Release()
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// teardown removes everything the instance made and reports what is left.
func (in *instance) teardown() error {
	var errs []error
	holderAlive := in.HolderPID != 0 && alive(in.HolderPID, in.HolderStart)
	if left := in.killAll(holderAlive, 15*time.Second); len(left) > 0 {
		errs = append(errs, fmt.Errorf("processes still running after SIGKILL: %v", left))
	}
	if holderAlive {
		if p, err := os.FindProcess(in.HolderPID); err == nil {
			if alive(in.HolderPID, in.HolderStart) {
				p.Signal(syscall.SIGKILL)
			}
			p.Release()
		}
	}
	if in.holder != nil {
		select {
		case <-in.holderGone:
		case <-time.After(10 * time.Second):
			errs = append(errs, fmt.Errorf("namespace holder pid %d did not exit", in.HolderPID))
		}
	} else {
		for i := 0; i < 100 && alive(in.HolderPID, in.HolderStart); i++ {
			time.Sleep(50 * time.Millisecond)
		}
	}
	// Anything that escaped the mount namespace (re-checked without it).
	if left := in.killAll(false, 5*time.Second); len(left) > 0 {
		errs = append(errs, fmt.Errorf("processes still running after SIGKILL: %v", left))
	}

	if err := unmountUnder(in.Root); err != nil {
		errs = append(errs, err)
	}
	if in.NetNS != "" {
		p := filepath.Join("/run/netns", in.NetNS)
		if _, err := os.Lstat(p); err == nil {
			if out, err := exec.Command("ip", "netns", "delete", in.NetNS).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("ip netns delete %s: %v: %s", in.NetNS, err, out))
			}
		}
	}
	for _, dir := range in.Cgroups {
		if err := removeCgroup(dir); err != nil {
			errs = append(errs, err)
		}
	}
	if err := os.RemoveAll(in.Root); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// removeCgroup removes a cgroup directory and its children, deepest first,
// retrying while the kernel still counts exiting tasks.
func removeCgroup(dir string) error {
	var dirs []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
	for _, d := range dirs {
		var err error
		for i := 0; i < 50; i++ {
			if err = syscall.Rmdir(d); err == nil || errors.Is(err, syscall.ENOENT) {
				err = nil
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			return fmt.Errorf("rmdir %s: %w", d, err)
		}
	}
	return nil
}

type mountEntry struct{ point, fstype string }

func readMountinfo() ([]mountEntry, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var out []mountEntry
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 10 {
			continue
		}
		sep := 6
		for sep < len(f) && f[sep] != "-" {
			sep++
		}
		if sep+1 >= len(f) {
			continue
		}
		out = append(out, mountEntry{point: unescapeMount(f[4]), fstype: f[sep+1]})
	}
	return out, nil
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// mountsUnder lists the test process's mounts at or below dir, deepest
// first. containerd's mounts live in the private namespace and vanish with
// it; this catches anything that reached the host's.
func mountsUnder(dir string) ([]string, error) {
	mi, err := readMountinfo()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range mi {
		if m.point == dir || strings.HasPrefix(m.point, dir+"/") {
			out = append(out, m.point)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out, nil
}

func unmountUnder(dir string) error {
	mounts, err := mountsUnder(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, m := range mounts {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", m, err))
		}
	}
	return errors.Join(errs...)
}

// sweepStale tears down the instances of test processes that are gone.
func sweepStale(t testing.TB) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join("/tmp", rootPrefix+"*", "instance.json"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var in instance
		if json.Unmarshal(b, &in) != nil || in.Root != filepath.Dir(f) || !strings.HasPrefix(filepath.Base(in.Root), rootPrefix) {
			continue
		}
		if alive(in.OwnerPID, in.OwnerStart) {
			continue
		}
		// One sweeper per instance when several test binaries start at once.
		lock, err := os.OpenFile(filepath.Join(in.Root, ".sweep.lock"), os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			continue
		}
		if syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
			lock.Close()
			continue
		}
		t.Logf("containerd harness: cleaning up %s left by dead test process %d", in.Root, in.OwnerPID)
		if err := in.teardown(); err != nil {
			t.Logf("containerd harness: stale %s: %v", in.Root, err)
		}
		lock.Close()
	}
}
