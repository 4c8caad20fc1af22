package jail

import "golang.org/x/sys/unix"

const auditArch = unix.AUDIT_ARCH_AARCH64

const foreignNrBit = 0

var archDeniedSyscalls = []uintptr{}

// archQEMUSyscalls are QEMU's calls that only some architectures have.
var archQEMUSyscalls = []uintptr{}
