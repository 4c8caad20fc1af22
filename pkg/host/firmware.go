package host

import (
	"path"
	"strings"
)

// secureBootMarks appear in the names of OVMF builds for Secure Boot
// (Debian's OVMF_CODE_4M.ms.fd, .secboot.fd, .snakeoil.fd; Fedora's
// OVMF_CODE.secboot.fd). Those need SMM and enrolled keys; vmpod's "uefi"
// is plain UEFI, so they are skipped. On q35 libvirt lists them first.
var secureBootMarks = []string{"secboot", ".ms.", "snakeoil"}

// pickUEFI chooses the first plain-UEFI code image in libvirt's order that
// has an NVRAM template, and, when present is not nil, whose two files
// exist.
func pickUEFI(codes []string, present func(string) bool) (code, vars string) {
	for _, c := range codes {
		if isSecureBoot(c) {
			continue
		}
		v := varsFor(c)
		if v == "" {
			continue
		}
		if present != nil && !(present(c) && present(v)) {
			continue
		}
		return c, v
	}
	return "", ""
}

func isSecureBoot(code string) bool {
	base := path.Base(code)
	for _, m := range secureBootMarks {
		if strings.Contains(base, m) {
			return true
		}
	}
	return false
}

// varsFor derives the NVRAM template from the code image's name. Domain
// capabilities list only code images, and edk2 packages ship the pair side
// by side with CODE/code swapped for VARS/vars (OVMF_CODE_4M.fd and
// OVMF_VARS_4M.fd on Debian). It returns "" when the name has no such part,
// e.g. a combined image like OVMF.fd.
func varsFor(code string) string {
	dir, base := path.Split(code)
	for _, r := range [][2]string{{"CODE", "VARS"}, {"code", "vars"}} {
		if i := strings.LastIndex(base, r[0]); i >= 0 {
			return dir + base[:i] + r[1] + base[i+len(r[0]):]
		}
	}
	return ""
}

// findQBoot looks for the qboot ROM in QEMU's data directory next to the
// emulator (/usr/bin/qemu-system-x86_64 -> /usr/share/qemu), then in the
// distribution default. libvirt does not report qboot, so without present
// there is no way to know and it returns "".
func findQBoot(arch, emulator string, present func(string) bool) string {
	if present == nil || (arch != "x86_64" && arch != "i686") {
		return ""
	}
	candidates := []string{"/usr/share/qemu/qboot.rom"}
	if path.IsAbs(emulator) {
		prefix := path.Dir(path.Dir(emulator))
		candidates = append([]string{path.Join(prefix, "share/qemu/qboot.rom")}, candidates...)
	}
	for _, c := range candidates {
		if present(c) {
			return c
		}
	}
	return ""
}
