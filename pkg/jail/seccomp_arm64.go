package jail

import "golang.org/x/sys/unix"

const auditArch = unix.AUDIT_ARCH_AARCH64

const foreignNrBit = 0

var archDeniedSyscalls = []uintptr{}
