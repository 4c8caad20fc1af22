//go:build !amd64 && !arm64

package jail

// No filter is built for this architecture: a spec that asks for one is
// refused (filter), never run without it.
const auditArch = 0

const foreignNrBit = 0

var archDeniedSyscalls = []uintptr{}

var archQEMUSyscalls = []uintptr{}
