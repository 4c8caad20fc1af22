package testguest

import (
	"strconv"
	"strings"
	"syscall"
)

// KernelKeepsExitStatus reports whether this kernel tells a process that
// is not QEMU's parent how QEMU died (pidfd exit information, Linux
// 6.15+): on older kernels a runtime learns the signal only if init has
// not reaped QEMU yet, so a test of a killed QEMU accepts "QEMUFailed"
// (exit status 1) there.
func KernelKeepsExitStatus() bool {
	var u syscall.Utsname
	if err := syscall.Uname(&u); err != nil {
		return false
	}
	var b strings.Builder
	for _, c := range u.Release {
		if c == 0 {
			break
		}
		b.WriteByte(byte(c))
	}
	parts := strings.SplitN(b.String(), ".", 3)
	if len(parts) < 2 {
		return false
	}
	major, _ := strconv.Atoi(parts[0])
	minor, _ := strconv.Atoi(strings.TrimLeftFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
	return major > 6 || major == 6 && minor >= 15
}
