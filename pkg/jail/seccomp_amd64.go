package jail

import "golang.org/x/sys/unix"

const auditArch = unix.AUDIT_ARCH_X86_64

// foreignNrBit marks x32 syscalls, which share x86_64's arch value.
const foreignNrBit = 0x40000000

var archDeniedSyscalls = []uintptr{
	unix.SYS_FORK, unix.SYS_VFORK, // clone is filtered by its flags
	unix.SYS_IOPL, unix.SYS_IOPERM, unix.SYS_MODIFY_LDT,
	unix.SYS_USELIB, unix.SYS_USTAT, unix.SYS_SYSFS, unix.SYS__SYSCTL, unix.SYS_CREATE_MODULE,
}

// archQEMUSyscalls are QEMU's calls that only some architectures have:
// x86_64's older forms of calls every architecture has in *at or 2/3/4
// form, which glibc and glib still make here.
var archQEMUSyscalls = []uintptr{
	unix.SYS_OPEN, unix.SYS_STAT, unix.SYS_LSTAT, unix.SYS_ACCESS, unix.SYS_READLINK, unix.SYS_UNLINK,
	unix.SYS_POLL, unix.SYS_SELECT, unix.SYS_EPOLL_WAIT, unix.SYS_EPOLL_CREATE, unix.SYS_PIPE, unix.SYS_DUP2,
	unix.SYS_EVENTFD, unix.SYS_SIGNALFD, unix.SYS_GETDENTS, unix.SYS_TIME, unix.SYS_ALARM, unix.SYS_GETPGRP,
	unix.SYS_ARCH_PRCTL,
}
