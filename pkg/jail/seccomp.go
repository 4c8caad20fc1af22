package jail

import (
	"fmt"
	"runtime"
	"slices"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The jailer's seccomp filters, installed just before the exec.
// ProfileQEMU is QEMU's allow list (seccomp_qemu.go). ProfileImageTool,
// for qemu-img, which installs no filter of its own, is, like QEMU's
// -sandbox, a deny list, of the kernel's surface a program that reads and
// writes image files never needs: new processes and namespaces, mounts,
// changes of credentials, tracing and other processes' memory, keys, BPF,
// perf, userfaultfd, io_uring, modules and kexec, sockets (no network),
// clocks and host names, and syscalls of another ABI (x32, i386), which
// would name the same calls by other numbers. A denied call fails with
// EPERM (ENOSYS for clone3, io_uring and foreign ABIs, so that glibc
// falls back to clone, whose flags the filter can read, and QEMU's event
// loop to ppoll); nothing is killed.
//
// execve stays allowed: the jailer itself execs the program after
// installing the filter, and an exec inside the jail gains nothing (the
// same filter, uid, mount namespace and no_new_privs carry over, so no
// set-uid bit or file capability takes effect).

// seccompData offsets (struct seccomp_data): nr, arch, then the
// arguments, 64 bits each; the low half of an argument comes first on
// the little-endian machines the filter is built for.
const (
	offNr    = 0
	offArch  = 4
	offArgLo = 16 // args[0], low 32 bits
)

// deniedSyscalls fail with EPERM on every architecture.
var deniedSyscalls = []uintptr{
	// Namespaces, mounts and roots.
	unix.SYS_UNSHARE, unix.SYS_SETNS, unix.SYS_MOUNT, unix.SYS_UMOUNT2, unix.SYS_PIVOT_ROOT, unix.SYS_CHROOT,
	unix.SYS_OPEN_TREE, unix.SYS_MOVE_MOUNT, unix.SYS_FSOPEN, unix.SYS_FSCONFIG, unix.SYS_FSMOUNT, unix.SYS_FSPICK,
	unix.SYS_MOUNT_SETATTR, unix.SYS_OPEN_BY_HANDLE_AT, unix.SYS_NAME_TO_HANDLE_AT, unix.SYS_FANOTIFY_INIT,
	// Credentials.
	unix.SYS_SETUID, unix.SYS_SETGID, unix.SYS_SETREUID, unix.SYS_SETREGID, unix.SYS_SETRESUID, unix.SYS_SETRESGID,
	unix.SYS_SETGROUPS, unix.SYS_SETFSUID, unix.SYS_SETFSGID, unix.SYS_CAPSET, unix.SYS_PERSONALITY,
	// Other processes.
	unix.SYS_PTRACE, unix.SYS_PROCESS_VM_READV, unix.SYS_PROCESS_VM_WRITEV, unix.SYS_KCMP, unix.SYS_PIDFD_GETFD,
	unix.SYS_PROCESS_MADVISE,
	// Kernel surface.
	unix.SYS_BPF, unix.SYS_PERF_EVENT_OPEN, unix.SYS_USERFAULTFD, unix.SYS_KEYCTL, unix.SYS_ADD_KEY, unix.SYS_REQUEST_KEY,
	unix.SYS_LOOKUP_DCOOKIE,
	// The machine.
	unix.SYS_KEXEC_LOAD, unix.SYS_KEXEC_FILE_LOAD, unix.SYS_INIT_MODULE, unix.SYS_FINIT_MODULE, unix.SYS_DELETE_MODULE,
	unix.SYS_REBOOT, unix.SYS_SWAPON, unix.SYS_SWAPOFF, unix.SYS_ACCT, unix.SYS_QUOTACTL, unix.SYS_SYSLOG,
	unix.SYS_VHANGUP, unix.SYS_SETTIMEOFDAY, unix.SYS_CLOCK_SETTIME, unix.SYS_CLOCK_ADJTIME, unix.SYS_ADJTIMEX,
	unix.SYS_SETHOSTNAME, unix.SYS_SETDOMAINNAME, unix.SYS_NFSSERVCTL,
	// Scheduling of the node (QEMU's resourcecontrol=deny).
	unix.SYS_SETPRIORITY, unix.SYS_SCHED_SETSCHEDULER, unix.SYS_SCHED_SETPARAM, unix.SYS_SCHED_SETATTR,
	// The network.
	unix.SYS_SOCKET,
}

// unimplementedSyscalls fail with ENOSYS, as if the kernel lacked them.
var unimplementedSyscalls = []uintptr{
	unix.SYS_CLONE3, // its flags are behind a pointer; clone's are not
	unix.SYS_IO_URING_SETUP, unix.SYS_IO_URING_ENTER, unix.SYS_IO_URING_REGISTER,
}

func bpfStmt(code uint16, k uint32) unix.SockFilter { return unix.SockFilter{Code: code, K: k} }

func bpfJump(code uint16, k uint32, jt, jf uint8) unix.SockFilter {
	return unix.SockFilter{Code: code, Jt: jt, Jf: jf, K: k}
}

const (
	ldAbs   = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
	jeq     = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
	jge     = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
	jset    = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
	ret     = unix.BPF_RET | unix.BPF_K
	retOK   = unix.SECCOMP_RET_ALLOW
	retPerm = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	retNoSy = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)

	// cloneNamespaces are clone's flags for new namespaces (CLONE_NEWTIME
	// is clone3's only: its bit is clone's exit signal).
	cloneNamespaces = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
		unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET
)

// filterPrologue loads the syscall number of a call of this
// architecture's native ABI; a call of any other fails with ENOSYS.
func filterPrologue() []unix.SockFilter {
	p := []unix.SockFilter{
		bpfStmt(ldAbs, offArch),
		bpfJump(jeq, auditArch, 1, 0),
		bpfStmt(ret, retNoSy), // another ABI
		bpfStmt(ldAbs, offNr),
	}
	if foreignNrBit != 0 {
		p = append(p, bpfJump(jge, foreignNrBit, 0, 1), bpfStmt(ret, retNoSy))
	}
	return p
}

// denyAll returns action for each of nrs. The syscall number stays
// loaded.
func denyAll(nrs []uintptr, action uint32) []unix.SockFilter {
	var p []unix.SockFilter
	for _, nr := range nrs {
		p = append(p, bpfJump(jeq, uint32(nr), 0, 1), bpfStmt(ret, action))
	}
	return p
}

// cloneThreadsOnly lets clone make threads only, in the process's own
// namespaces, and refuses every other clone with EPERM. It falls
// through, the syscall number still loaded, for other calls.
func cloneThreadsOnly() []unix.SockFilter {
	return []unix.SockFilter{
		bpfJump(jeq, uint32(unix.SYS_CLONE), 0, 5),
		bpfStmt(ldAbs, offArgLo),
		bpfJump(jset, cloneNamespaces, 2, 0),
		bpfJump(jset, unix.CLONE_THREAD, 0, 1),
		bpfStmt(ret, retOK),
		bpfStmt(ret, retPerm),
	}
}

// virtiofsdAllowed are the calls of deniedSyscalls a virtio-fs file
// server makes: its sandbox's namespaces (unshare, filtered by its flags),
// its mounts and pivot_root, its switches to each request's credentials,
// its capability drop.
var virtiofsdAllowed = []uintptr{
	unix.SYS_UNSHARE, unix.SYS_MOUNT, unix.SYS_UMOUNT2, unix.SYS_PIVOT_ROOT,
	unix.SYS_SETRESUID, unix.SYS_SETRESGID, unix.SYS_CAPSET,
}

// virtiofsdDenied is ProfileImageTool's list less virtiofsdAllowed: among
// what stays refused are new user namespaces (unshare's flags), setns,
// chroot, setgroups, every socket (its one socket is handed to it),
// ptrace and other processes' memory, BPF, keys and the machine.
func virtiofsdDenied() []uintptr {
	return slices.DeleteFunc(slices.Concat(deniedSyscalls, archDeniedSyscalls), func(nr uintptr) bool {
		return slices.Contains(virtiofsdAllowed, nr)
	})
}

// unshareFileServerOnly lets unshare make what a file server's sandbox
// needs (a filesystem context of a thread's own; mount, PID and network
// namespaces) and refuses any other flag, a user namespace above all,
// with EPERM. It falls through, the syscall number still loaded, for
// other calls.
func unshareFileServerOnly() []unix.SockFilter {
	const allowed = unix.CLONE_FS | unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWNET
	return []unix.SockFilter{
		bpfJump(jeq, uint32(unix.SYS_UNSHARE), 0, 4),
		bpfStmt(ldAbs, offArgLo),
		bpfJump(jset, ^uint32(allowed), 1, 0),
		bpfStmt(ret, retOK),
		bpfStmt(ret, retPerm),
	}
}

// cloneNoNamespaces lets clone make threads and processes in the
// process's own namespaces, and refuses a clone into new ones with EPERM.
// It falls through, the syscall number still loaded, for other calls.
func cloneNoNamespaces() []unix.SockFilter {
	return []unix.SockFilter{
		bpfJump(jeq, uint32(unix.SYS_CLONE), 0, 4),
		bpfStmt(ldAbs, offArgLo),
		bpfJump(jset, cloneNamespaces, 1, 0),
		bpfStmt(ret, retOK),
		bpfStmt(ret, retPerm),
	}
}

// filter is profile's program for this architecture.
func filter(profile Profile) ([]unix.SockFilter, error) {
	if auditArch == 0 {
		return nil, fmt.Errorf("no seccomp filter for %s", runtime.GOARCH)
	}
	switch profile {
	case ProfileImageTool:
		p := filterPrologue()
		p = append(p, denyAll(slices.Concat(deniedSyscalls, archDeniedSyscalls), retPerm)...)
		p = append(p, denyAll(unimplementedSyscalls, retNoSy)...)
		p = append(p, cloneThreadsOnly()...)
		return append(p, bpfStmt(ret, retOK)), nil
	case ProfileVirtiofsd:
		p := filterPrologue()
		p = append(p, denyAll(virtiofsdDenied(), retPerm)...)
		p = append(p, denyAll(unimplementedSyscalls, retNoSy)...)
		p = append(p, unshareFileServerOnly()...)
		p = append(p, cloneNoNamespaces()...)
		return append(p, bpfStmt(ret, retOK)), nil
	case ProfileQEMU:
		return qemuFilter(), nil
	}
	return nil, fmt.Errorf("no seccomp profile %q", profile)
}

// installSeccomp installs profile's filter on the calling thread, which
// must have no_new_privs set and be the one that execs.
func installSeccomp(profile Profile) error {
	p, err := filter(profile)
	if err != nil {
		return err
	}
	prog := unix.SockFprog{Len: uint16(len(p)), Filter: &p[0]}
	err = unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&prog)), 0, 0)
	runtime.KeepAlive(p)
	if err != nil {
		return fmt.Errorf("seccomp filter: %w", err)
	}
	return nil
}
