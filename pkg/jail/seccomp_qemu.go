package jail

import (
	"slices"

	"golang.org/x/sys/unix"
)

// QEMU's allow list (ProfileQEMU). QEMU installs its own filter once it
// has started (-sandbox, a deny list); this one is in place from its
// first instruction and names what QEMU may call, so a call nobody
// reviewed fails instead of reaching the kernel. It holds what QEMU was
// seen calling through a VM's life under TCG (start, boot, console,
// guest agent exec, disk writes and the disk cap, panic, reboot, ACPI
// shutdown: strace of pkg/vm's tests), what KVM, vhost, tap, block
// volumes, hotplug and vhost-user devices add, and the fallbacks glibc
// and glib take when a newer call is missing.
//
// Refused with EPERM: what the deny list refuses (ptrace,
// process_vm_readv/writev, userfaultfd, bpf, keyctl, perf, mounts,
// namespaces, credentials, modules, the clock); a new process (clone
// without CLONE_THREAD or with a namespace flag, fork, vfork); a socket
// of any family but AF_UNIX (QEMU's network is the tap libvirt hands it;
// its sockets are the monitor's, the consoles' and vhost-user's).
// Refused with ENOSYS, as if the kernel lacked it: everything else
// (clone3 and io_uring among them, so that glibc falls back to clone and
// QEMU's event loop to ppoll).

// qemuHotSyscalls are checked first: the calls QEMU makes per guest
// exit, I/O request or event loop turn.
var qemuHotSyscalls = []uintptr{
	unix.SYS_IOCTL, unix.SYS_PPOLL, unix.SYS_READ, unix.SYS_WRITE, unix.SYS_FUTEX,
	unix.SYS_RECVMSG, unix.SYS_SENDMSG, unix.SYS_PREADV, unix.SYS_PWRITEV, unix.SYS_PREAD64, unix.SYS_PWRITE64,
	unix.SYS_IO_SUBMIT, unix.SYS_IO_GETEVENTS, unix.SYS_IO_PGETEVENTS, unix.SYS_READV, unix.SYS_WRITEV,
	unix.SYS_EPOLL_PWAIT, unix.SYS_EPOLL_PWAIT2, unix.SYS_RT_SIGTIMEDWAIT, unix.SYS_TGKILL,
	unix.SYS_CLOCK_GETTIME, unix.SYS_CLOCK_NANOSLEEP, unix.SYS_NANOSLEEP, unix.SYS_SCHED_YIELD,
	unix.SYS_FDATASYNC, unix.SYS_FSYNC, unix.SYS_FALLOCATE, unix.SYS_LSEEK,
}

// qemuSyscalls are QEMU's other calls, on every architecture.
var qemuSyscalls = []uintptr{
	// Files: QEMU opens what its jail shows it (images, firmware, its
	// VM dir, /dev/kvm, /proc/self), and never links, renames or makes
	// one but a listening socket, which it may unlink.
	unix.SYS_OPENAT, unix.SYS_CLOSE, unix.SYS_CLOSE_RANGE, unix.SYS_FSTAT, unix.SYS_NEWFSTATAT, unix.SYS_STATX,
	unix.SYS_STATFS, unix.SYS_FSTATFS, unix.SYS_FACCESSAT, unix.SYS_FACCESSAT2, unix.SYS_READLINKAT,
	unix.SYS_GETDENTS64, unix.SYS_FCNTL, unix.SYS_FLOCK, unix.SYS_DUP, unix.SYS_DUP3, unix.SYS_FTRUNCATE,
	unix.SYS_PREADV2, unix.SYS_PWRITEV2, unix.SYS_SYNC_FILE_RANGE, unix.SYS_FADVISE64, unix.SYS_READAHEAD,
	unix.SYS_COPY_FILE_RANGE, unix.SYS_UNLINKAT, unix.SYS_GETCWD, unix.SYS_CHDIR, unix.SYS_FCHDIR,
	unix.SYS_UMASK, unix.SYS_MEMFD_CREATE, unix.SYS_PIPE2, unix.SYS_EVENTFD2, unix.SYS_SIGNALFD4,
	unix.SYS_TIMERFD_CREATE, unix.SYS_TIMERFD_SETTIME, unix.SYS_TIMERFD_GETTIME,
	unix.SYS_EPOLL_CREATE1, unix.SYS_EPOLL_CTL, unix.SYS_PSELECT6,
	// Linux AIO (aio=native).
	unix.SYS_IO_SETUP, unix.SYS_IO_DESTROY, unix.SYS_IO_CANCEL,
	// Memory: guest RAM, TCG's code buffer, NUMA policy.
	unix.SYS_BRK, unix.SYS_MMAP, unix.SYS_MUNMAP, unix.SYS_MPROTECT, unix.SYS_MREMAP, unix.SYS_MADVISE,
	unix.SYS_MINCORE, unix.SYS_MSYNC, unix.SYS_MLOCK, unix.SYS_MLOCK2, unix.SYS_MUNLOCK, unix.SYS_MLOCKALL,
	unix.SYS_MUNLOCKALL, unix.SYS_MBIND, unix.SYS_SET_MEMPOLICY, unix.SYS_GET_MEMPOLICY, unix.SYS_MEMBARRIER,
	// Threads and signals (clone is checked apart: threads only).
	unix.SYS_SET_ROBUST_LIST, unix.SYS_GET_ROBUST_LIST, unix.SYS_SET_TID_ADDRESS, unix.SYS_RSEQ,
	unix.SYS_FUTEX_WAITV, unix.SYS_EXIT, unix.SYS_EXIT_GROUP, unix.SYS_WAIT4, unix.SYS_WAITID,
	unix.SYS_RT_SIGACTION, unix.SYS_RT_SIGPROCMASK, unix.SYS_RT_SIGRETURN, unix.SYS_RT_SIGSUSPEND,
	unix.SYS_RT_SIGPENDING, unix.SYS_SIGALTSTACK, unix.SYS_RESTART_SYSCALL, unix.SYS_TKILL, unix.SYS_KILL,
	unix.SYS_SCHED_GETAFFINITY, unix.SYS_SCHED_SETAFFINITY, unix.SYS_SCHED_GETPARAM, unix.SYS_SCHED_GETSCHEDULER,
	unix.SYS_GETPRIORITY, unix.SYS_PRCTL, unix.SYS_SECCOMP,
	// Timers and clocks (read only).
	unix.SYS_GETTIMEOFDAY, unix.SYS_CLOCK_GETRES, unix.SYS_TIMER_CREATE, unix.SYS_TIMER_SETTIME,
	unix.SYS_TIMER_GETTIME, unix.SYS_TIMER_GETOVERRUN, unix.SYS_TIMER_DELETE, unix.SYS_SETITIMER,
	unix.SYS_GETITIMER,
	// Who and where it is.
	unix.SYS_GETPID, unix.SYS_GETTID, unix.SYS_GETPPID, unix.SYS_GETUID, unix.SYS_GETEUID, unix.SYS_GETGID,
	unix.SYS_GETEGID, unix.SYS_GETRESUID, unix.SYS_GETRESGID, unix.SYS_GETGROUPS, unix.SYS_GETPGID,
	unix.SYS_GETSID, unix.SYS_SETSID, unix.SYS_UNAME, unix.SYS_SYSINFO, unix.SYS_GETRANDOM, unix.SYS_GETCPU,
	unix.SYS_GETRUSAGE, unix.SYS_TIMES, unix.SYS_PRLIMIT64, unix.SYS_GETRLIMIT, unix.SYS_SETRLIMIT,
	unix.SYS_CAPGET,
	// AF_UNIX sockets (socket itself is checked apart).
	unix.SYS_SOCKETPAIR, unix.SYS_BIND, unix.SYS_LISTEN, unix.SYS_ACCEPT, unix.SYS_ACCEPT4, unix.SYS_CONNECT,
	unix.SYS_GETSOCKNAME, unix.SYS_GETPEERNAME, unix.SYS_GETSOCKOPT, unix.SYS_SETSOCKOPT, unix.SYS_SHUTDOWN,
	unix.SYS_SENDTO, unix.SYS_RECVFROM, unix.SYS_SENDMMSG, unix.SYS_RECVMMSG,
	// The jailer's exec of QEMU itself, after the filter is in place. An
	// exec inside the jail gains nothing: same filter, uid, namespaces,
	// no_new_privs; QEMU's own filter refuses it (spawn=deny).
	unix.SYS_EXECVE,
}

// qemuFilter is ProfileQEMU's program for this architecture.
func qemuFilter() []unix.SockFilter {
	p := filterPrologue()
	allow := func(nrs []uintptr) {
		for _, nr := range nrs {
			p = append(p, bpfJump(jeq, uint32(nr), 0, 1), bpfStmt(ret, retOK))
		}
	}
	allow(qemuHotSyscalls)
	p = append(p, cloneThreadsOnly()...)
	// socket: AF_UNIX only.
	p = append(p,
		bpfJump(jeq, uint32(unix.SYS_SOCKET), 0, 4),
		bpfStmt(ldAbs, offArgLo),
		bpfJump(jeq, unix.AF_UNIX, 0, 1),
		bpfStmt(ret, retOK),
		bpfStmt(ret, retPerm),
	)
	p = append(p, denyAll(slices.Concat(deniedSyscalls, archDeniedSyscalls), retPerm)...)
	allow(slices.Concat(qemuSyscalls, archQEMUSyscalls))
	return append(p, bpfStmt(ret, retNoSy))
}
