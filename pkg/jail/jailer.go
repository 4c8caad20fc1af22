package jail

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/vmpod/vmpod/pkg/podcgroup"
)

// ExitFailed is the jailer's exit status when it cannot jail or exec the
// program: a caller tells it from the program's own failure (qemu-img
// exits 1 for an image it cannot read).
const ExitFailed = 125

// Main is the jailer: vm-runtime called as EmulatorName with QEMU's (or
// qemu-img's) arguments. It execs the program or returns an exit status
// after printing why not on stderr (libvirt's log of the domain, and its
// error).
func Main(args []string) int {
	// Namespaces, credentials and capabilities below are the calling
	// thread's: the whole setup and the exec run on this one thread.
	runtime.LockOSThread()
	path := os.Getenv(EnvSpec)
	if path == "" {
		return probe(args)
	}
	err := jailAndExec(path, args)
	fmt.Fprintf(os.Stderr, "%s: %v\n", EmulatorName, err)
	return ExitFailed
}

// probe runs QEMU as libvirt asked, for its capability probe only.
func probe(args []string) int {
	if slices.Contains(args, "-name") || !slices.Contains(args, "-qmp") {
		fmt.Fprintf(os.Stderr, "%s: refusing to run a guest without a jail (%s is not set)\n", EmulatorName, EnvSpec)
		return 1
	}
	qemu, err := exec.LookPath(probeEmulator())
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", EmulatorName, err)
		return 1
	}
	err = syscall.Exec(qemu, append([]string{qemu}, args...), os.Environ())
	fmt.Fprintf(os.Stderr, "%s: exec %s: %v\n", EmulatorName, qemu, err)
	return 1
}

// probeEmulator is the QEMU binary of this machine's architecture.
func probeEmulator() string {
	switch runtime.GOARCH {
	case "arm64":
		return "qemu-system-aarch64"
	default:
		return "qemu-system-x86_64"
	}
}

func jailAndExec(specPath string, args []string) error {
	s, err := Read(specPath)
	if err != nil {
		return err
	}
	if s.Cgroup != nil {
		// First: all the jailer and QEMU then do is the container's.
		if err := enterCgroup(*s.Cgroup, os.Getpid()); err != nil {
			return fmt.Errorf("enter the container's cgroup: %w", err)
		}
	}
	if s.Netns != "" {
		// Then the pod's network namespace, while the host's /proc and
		// /run are still in sight.
		if err := enterNetns(s.Netns); err != nil {
			return err
		}
	}
	readOnly := slices.Clone(s.ReadOnly)
	owned := slices.Clone(s.Owned)
	if key := secretFile(args, s.SecretDir); key != "" {
		owned = append(owned, key)
		readOnly = append(readOnly, key)
	}
	for _, p := range s.Writable {
		if err := prepareWritable(p, int(s.UID), int(s.GID)); err != nil {
			return err
		}
	}
	for _, p := range owned {
		if err := giveOwned(p, int(s.UID), int(s.GID)); err != nil {
			return err
		}
	}
	last, err := lastCap() // read while the host's /proc is there
	if err != nil {
		return err
	}
	if s.OOMScoreAdj != nil {
		if err := setOOMScoreAdj(*s.OOMScoreAdj); err != nil {
			return err
		}
	}
	if err := buildRoot(s, readOnly); err != nil {
		return err
	}
	if err := limit(s.FileSizeLimit); err != nil {
		return err
	}
	keep := make([]uintptr, 0, len(s.Capabilities))
	for _, c := range s.Capabilities {
		keep = append(keep, FileServerCapabilities[c]) // Validate allowed only these
	}
	if err := dropPrivileges(s.UID, s.GID, last, keep); err != nil {
		return err
	}
	env := []string{}
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, EnvSpec+"=") {
			env = append(env, e)
		}
	}
	argv := append([]string{s.QEMU}, args...)
	if s.Seccomp != "" {
		// Last: from here on this thread runs under the filter.
		if err := installSeccomp(s.Seccomp); err != nil {
			return err
		}
	}
	return fmt.Errorf("exec %s: %w", s.QEMU, syscall.Exec(s.QEMU, argv, env))
}

// enterCgroup moves pid, all its threads, into c, made with c's limits
// if it is not there (pkg/podcgroup, on either cgroup driver).
func enterCgroup(c Cgroup, pid int) error {
	p, err := podcgroup.Parse(c.Path)
	if err != nil {
		return err
	}
	l := podcgroup.Limits{MemoryBytes: c.MemoryBytes}
	if c.CPUShares != nil || c.CPUQuota != nil || c.CPUPeriod != nil {
		l.CPU = &specs.LinuxCPU{Shares: c.CPUShares, Quota: c.CPUQuota, Period: c.CPUPeriod}
	}
	_, err = podcgroup.Enter(p, pid, l)
	return err
}

// enterNetns moves the calling thread, which execs QEMU, into the
// network namespace at path.
func enterNetns(path string) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("the pod's network namespace: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("enter the pod's network namespace %s: %w", path, err)
	}
	return nil
}

// secretFile finds the file below dir that QEMU's command line hands to a
// secret object: libvirt's master key, "file":"<dir>/.../master-key.aes".
func secretFile(args []string, dir string) string {
	if dir == "" {
		return ""
	}
	for i, a := range args {
		if a != "-object" || i+1 >= len(args) {
			continue
		}
		var obj struct {
			Type string `json:"qom-type"`
			File string `json:"file"`
		}
		if json.Unmarshal([]byte(args[i+1]), &obj) != nil || obj.Type != "secret" {
			continue
		}
		f := filepath.Clean(obj.File)
		if strings.HasPrefix(f, filepath.Clean(dir)+"/") {
			return f
		}
	}
	return ""
}

// prepareWritable readies a Writable path: a file is given to uid:gid;
// a dir and the dirs below it are made root's and 0755, and the regular
// files below it read-only (0444), until giveOwned gives QEMU its own.
// No link is followed.
func prepareWritable(root string, uid, gid int) error {
	fi, err := os.Lstat(root)
	if err != nil {
		return err
	}
	switch {
	case fi.Mode().IsRegular():
		return lchown(root, uid, gid)
	case !fi.IsDir():
		return fmt.Errorf("writable %s: not a dir or a regular file (%s)", root, fi.Mode().Type())
	}
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch {
		case d.IsDir(): // WalkDir does not follow links: a real dir
			if err := lchown(p, 0, 0); err != nil {
				return err
			}
			return os.Chmod(p, 0o755)
		case d.Type().IsRegular():
			if err := lchown(p, 0, 0); err != nil {
				return err
			}
			return os.Chmod(p, 0o444)
		}
		return nil
	})
}

// giveOwned gives an Owned path to uid:gid: a regular file, or the device
// nodes of a dir (not the dir, nor anything else in it). A path that does
// not exist is skipped; a link is refused.
func giveOwned(p string, uid, gid int) error {
	fi, err := os.Lstat(p)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return err
	case fi.Mode().IsRegular():
		if err := lchown(p, uid, gid); err != nil {
			return err
		}
		return os.Chmod(p, 0o600)
	case !fi.IsDir():
		return fmt.Errorf("owned %s: not a dir or a regular file (%s)", p, fi.Mode().Type())
	}
	entries, err := os.ReadDir(p)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Type()&(fs.ModeDevice|fs.ModeCharDevice) != 0 {
			if err := lchown(filepath.Join(p, e.Name()), uid, gid); err != nil {
				return err
			}
		}
	}
	return nil
}

func lchown(p string, uid, gid int) error {
	if err := os.Lchown(p, uid, gid); err != nil {
		return fmt.Errorf("give %s to uid %d: %w", p, uid, err)
	}
	return nil
}

const (
	flagsRO  = unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV
	flagsRON = flagsRO | unix.MS_NOEXEC
)

// jailHostname is the host name QEMU sees in its own UTS namespace.
const jailHostname = "vmpod-qemu"

// buildRoot makes the jail's namespaces (mount, IPC: no System V IPC
// object or POSIX queue of the node in sight; UTS: the node's name
// neither seen nor changeable) and its root, and enters them.
func buildRoot(s Spec, readOnly []string) error {
	if err := unix.Unshare(unix.CLONE_NEWNS | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS); err != nil {
		return fmt.Errorf("mount, IPC and UTS namespaces: %w", err)
	}
	if err := unix.Sethostname([]byte(jailHostname)); err != nil {
		return fmt.Errorf("the jail's host name: %w", err)
	}
	// Nothing done below propagates back to the host.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make / private: %w", err)
	}
	root := s.Root
	if err := unix.Mount("tmpfs", root, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=1m,nr_inodes=4096"); err != nil {
		return fmt.Errorf("jail root on %s: %w", root, err)
	}
	in := func(p string) string { return filepath.Join(root, p) }

	// The system: QEMU, its libraries, firmware and data, read-only.
	if err := bind("/usr", in("/usr"), flagsRO); err != nil {
		return err
	}
	for _, d := range []string{"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"} {
		fi, err := os.Lstat(d)
		switch {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			return err
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(d)
			if err != nil {
				return err
			}
			if err := os.Symlink(target, in(d)); err != nil {
				return err
			}
		case fi.IsDir():
			if err := bind(d, in(d), flagsRO); err != nil {
				return err
			}
		}
	}
	if _, err := os.Stat("/etc/ld.so.cache"); err == nil {
		if err := bind("/etc/ld.so.cache", in("/etc/ld.so.cache"), flagsRON); err != nil {
			return err
		}
	}
	if !strings.HasPrefix(s.QEMU, "/usr/") {
		if err := bind(s.QEMU, in(s.QEMU), flagsRO); err != nil { // executable
			return err
		}
	}
	if err := makeDev(in("/dev"), s); err != nil {
		return err
	}
	if err := makeProc(in("/proc")); err != nil {
		return err
	}
	// The VM's own files.
	for _, p := range s.Writable {
		if err := bind(p, in(p), unix.MS_NOSUID|unix.MS_NOEXEC); err != nil {
			return err
		}
	}
	for _, p := range readOnly {
		if err := bind(p, in(p), flagsRON); err != nil {
			return err
		}
	}
	for _, sh := range s.Shares {
		if err := bindShare(sh, in(sh.Path)); err != nil {
			return err
		}
	}

	if err := os.Chdir(root); err != nil {
		return err
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root into %s: %w", root, err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach the host's root: %w", err)
	}
	if err := os.Chdir("/"); err != nil {
		return err
	}
	if err := unix.Mount("", "/", "", unix.MS_REMOUNT|unix.MS_BIND|flagsRO, ""); err != nil {
		return fmt.Errorf("read-only jail root: %w", err)
	}
	return nil
}

// bind shows src at dst (created in the jail's tmpfs) with flags.
func bind(src, dst string, flags uintptr) error {
	fi, err := os.Stat(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	if fi.IsDir() {
		err = os.Mkdir(dst, 0o755)
	} else {
		err = os.WriteFile(dst, nil, 0o644)
	}
	if err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s: %w", src, err)
	}
	if err := unix.Mount("", dst, "", unix.MS_REMOUNT|unix.MS_BIND|flags, ""); err != nil {
		return fmt.Errorf("remount %s: %w", src, err)
	}
	return nil
}

// bindShare shows a file server's share at dst with what is mounted below
// it, nosuid, nodev and noexec all through, and read-only all through
// when the share is: mount_setattr reaches the mounts below it too, which
// a bind's remount would not.
func bindShare(sh Share, dst string) error {
	fi, err := os.Stat(sh.Path)
	if err != nil {
		return fmt.Errorf("share %s: %w", sh.Path, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("share %s: not a dir", sh.Path)
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	if err := unix.Mount(sh.Path, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind share %s: %w", sh.Path, err)
	}
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOEXEC}
	if sh.ReadOnly {
		attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
	}
	if err := unix.MountSetattr(unix.AT_FDCWD, dst, unix.AT_RECURSIVE, &attr); err != nil {
		return fmt.Errorf("share %s: mount attributes: %w", sh.Path, err)
	}
	return nil
}

var pseudoDevices = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"}

// makeDev fills the jail's /dev with binds: the usual pseudo-devices, the
// host's own nodes, and the spec's devices, from the nodes Prepare made
// for the jail's uid. Binds, not mknod: a devices cgroup (libvirt's, or a
// container's) may forbid making nodes but allows opening these.
func makeDev(dev string, s Spec) error {
	if err := os.Mkdir(dev, 0o755); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", dev, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0755,size=64k,nr_inodes=64"); err != nil {
		return fmt.Errorf("jail /dev: %w", err)
	}
	for _, d := range pseudoDevices {
		if err := bind(d, filepath.Join(dev, filepath.Base(d)), unix.MS_NOSUID|unix.MS_NOEXEC); err != nil {
			return err
		}
	}
	for _, d := range s.Devices {
		if slices.Contains(pseudoDevices, d) {
			continue
		}
		rel, _ := filepath.Rel("/dev", d)
		if err := bind(filepath.Join(s.DeviceDir, rel), filepath.Join(dev, rel), unix.MS_NOSUID|unix.MS_NOEXEC); err != nil {
			return err
		}
	}
	return unix.Mount("", dev, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NOEXEC, "")
}

// makeProc mounts a proc that shows the jail's uid its own processes only.
// Kernels before 5.8 share proc's options between all its mounts, so a
// hidepid there would hide processes from the host too: they reject
// "invisible" and the jail goes without /proc.
func makeProc(dir string) error {
	if err := os.Mkdir(dir, 0o555); err != nil {
		return err
	}
	err := unix.Mount("proc", dir, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "hidepid=invisible")
	if errors.Is(err, unix.EINVAL) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("jail /proc: %w", err)
	}
	return nil
}

// limit caps the size of files QEMU writes and turns off core dumps. A
// write past the cap fails with EFBIG instead of raising SIGXFSZ, whose
// default would kill QEMU: an ignored signal stays ignored across exec.
func limit(fileSize uint64) error {
	if err := unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{}); err != nil {
		return fmt.Errorf("RLIMIT_CORE: %w", err)
	}
	if fileSize == 0 {
		return nil
	}
	signal.Ignore(syscall.SIGXFSZ)
	if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &unix.Rlimit{Cur: fileSize, Max: fileSize}); err != nil {
		return fmt.Errorf("RLIMIT_FSIZE: %w", err)
	}
	return nil
}

// dropPrivileges leaves this thread with uid and gid, no supplementary
// groups and no capability in any set but keep's. Raw syscalls: they act
// on this thread alone, which is the one that execs.
func dropPrivileges(uid, gid uint32, last int, keep []uintptr) error {
	if len(keep) > 0 {
		return dropKeeping(uid, gid, last, keep)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, 0, 0, 0); e != 0 {
		return fmt.Errorf("setgroups: %w", e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(gid), uintptr(gid), uintptr(gid)); e != 0 {
		return fmt.Errorf("setresgid %d: %w", gid, e)
	}
	for c := 0; c <= last; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(uid), uintptr(uid), uintptr(uid)); e != 0 {
		return fmt.Errorf("setresuid %d: %w", uid, e)
	}
	// setresuid away from 0 empties the permitted and effective sets; the
	// inheritable one is emptied here.
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	return nil
}

// The securebits (linux/securebits.h): no_setuid_fixup keeps the
// capability sets as they are across uid changes, noroot grants none to
// uid 0 at exec, keep_caps (locked off) is then moot; each locked.
const (
	secbitNoroot              = 1 << 0
	secbitNorootLocked        = 1 << 1
	secbitNoSetuidFixup       = 1 << 2
	secbitNoSetuidFixupLocked = 1 << 3
	secbitKeepCapsLocked      = 1 << 5
)

// dropKeeping is dropPrivileges for a program that keeps the capabilities
// keep: every other one leaves the bounding set; the securebits make uid
// changes leave the sets alone, so the switch to uid keeps keep's in the
// permitted and effective sets; keep is then the inheritable, permitted
// and effective sets and, raised to ambient, what the program has after
// the exec.
func dropKeeping(uid, gid uint32, last int, keep []uintptr) error {
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, 0, 0, 0); e != 0 {
		return fmt.Errorf("setgroups: %w", e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(gid), uintptr(gid), uintptr(gid)); e != 0 {
		return fmt.Errorf("setresgid %d: %w", gid, e)
	}
	var mask [2]uint32
	for _, c := range keep {
		mask[c/32] |= 1 << (c % 32)
	}
	for c := 0; c <= last; c++ {
		if mask[c/32]&(1<<(c%32)) != 0 {
			continue
		}
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	bits := secbitNoroot | secbitNorootLocked | secbitNoSetuidFixup | secbitNoSetuidFixupLocked | secbitKeepCapsLocked
	if err := unix.Prctl(unix.PR_SET_SECUREBITS, uintptr(bits), 0, 0, 0); err != nil {
		return fmt.Errorf("securebits %#x: %w", bits, err)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(uid), uintptr(uid), uintptr(uid)); e != 0 {
		return fmt.Errorf("setresuid %d: %w", uid, e)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	data := [2]unix.CapUserData{
		{Effective: mask[0], Permitted: mask[0], Inheritable: mask[0]},
		{Effective: mask[1], Permitted: mask[1], Inheritable: mask[1]},
	}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	for _, c := range keep {
		if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_RAISE, c, 0, 0); err != nil {
			return fmt.Errorf("ambient capability %d: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	return nil
}

func lastCap() (int, error) {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// oomScoreAdjFile is the jailer's own oom_score_adj, which QEMU inherits
// through exec.
const oomScoreAdjFile = "/proc/self/oom_score_adj"

// setOOMScoreAdj gives the jailer, and so QEMU, the score adjustment v.
// Raising it is always allowed. Lowering it below the least value a
// process with CAP_SYS_RESOURCE gave this process's ancestors needs that
// capability, which nodes whose container runtime runs with
// restrict_oom_score_adj (no CAP_SYS_RESOURCE) do not have: then v is
// clamped to the inherited value, the lowest one known to be allowed, and
// the VM starts. The line on stderr lands in libvirt's log of the domain.
func setOOMScoreAdj(v int) error {
	err := os.WriteFile(oomScoreAdjFile, []byte(strconv.Itoa(v)), 0)
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.EACCES) && !errors.Is(err, unix.EPERM) {
		return fmt.Errorf("oom_score_adj %d: %w", v, err)
	}
	cur, rerr := os.ReadFile(oomScoreAdjFile)
	if rerr != nil {
		return fmt.Errorf("oom_score_adj %d: %v; reading it: %w", v, err, rerr)
	}
	fmt.Fprintf(os.Stderr, "%s: oom_score_adj %d refused (%v): QEMU keeps %s\n", EmulatorName, v, err, strings.TrimSpace(string(cur)))
	return nil
}
