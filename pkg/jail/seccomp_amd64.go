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
