package host

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestVarsFor(t *testing.T) {
	tests := map[string]string{
		"/usr/share/OVMF/OVMF_CODE_4M.fd":     "/usr/share/OVMF/OVMF_VARS_4M.fd",
		"/usr/share/OVMF/OVMF_CODE.fd":        "/usr/share/OVMF/OVMF_VARS.fd",
		"/usr/share/AAVMF/AAVMF_CODE.fd":      "/usr/share/AAVMF/AAVMF_VARS.fd",
		"/usr/share/qemu/edk2-x86_64-code.fd": "/usr/share/qemu/edk2-x86_64-vars.fd",
		"/opt/CODE/OVMF_CODE_4M.fd":           "/opt/CODE/OVMF_VARS_4M.fd", // only the file name changes
		"/usr/share/qemu/OVMF.fd":             "",                          // combined image, no template
		"":                                    "",
	}
	for code, want := range tests {
		if diff := cmp.Diff(want, varsFor(code)); diff != "" {
			t.Errorf("varsFor(%q) mismatch (-want +got):\n%s", code, diff)
		}
	}
}

func TestPickFirmware(t *testing.T) {
	q35 := []string{ // libvirt's order for q35 on Debian 12
		"/usr/share/OVMF/OVMF_CODE_4M.ms.fd",
		"/usr/share/OVMF/OVMF_CODE_4M.secboot.fd",
		"/usr/share/OVMF/OVMF_CODE_4M.fd",
	}
	only := func(paths ...string) func(string) bool {
		return func(p string) bool {
			for _, x := range paths {
				if p == x {
					return true
				}
			}
			return false
		}
	}
	tests := []struct {
		name     string
		codes    []string
		emulator string
		present  func(string) bool
		want     Firmware
	}{
		{
			name:  "secure boot images skipped, unchecked",
			codes: q35,
			want:  Firmware{UEFICode: "/usr/share/OVMF/OVMF_CODE_4M.fd", UEFIVars: "/usr/share/OVMF/OVMF_VARS_4M.fd"},
		},
		{
			name:    "vars template missing",
			codes:   q35,
			present: only("/usr/share/OVMF/OVMF_CODE_4M.fd", "/usr/share/qemu/qboot.rom"),
			want:    Firmware{QBoot: "/usr/share/qemu/qboot.rom"},
		},
		{
			name:    "second plain image has its vars",
			codes:   []string{"/usr/share/OVMF/OVMF_CODE.fd", "/usr/share/OVMF/OVMF_CODE_4M.fd"},
			present: only("/usr/share/OVMF/OVMF_CODE_4M.fd", "/usr/share/OVMF/OVMF_VARS_4M.fd"),
			want:    Firmware{UEFICode: "/usr/share/OVMF/OVMF_CODE_4M.fd", UEFIVars: "/usr/share/OVMF/OVMF_VARS_4M.fd"},
		},
		{
			name:     "qboot next to a local QEMU build first",
			emulator: "/usr/local/bin/qemu-system-x86_64",
			present:  only("/usr/local/share/qemu/qboot.rom", "/usr/share/qemu/qboot.rom"),
			want:     Firmware{QBoot: "/usr/local/share/qemu/qboot.rom"},
		},
		{
			name:     "qboot in the distribution default",
			emulator: "/usr/local/bin/qemu-system-x86_64",
			present:  only("/usr/share/qemu/qboot.rom"),
			want:     Firmware{QBoot: "/usr/share/qemu/qboot.rom"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got Firmware
			got.UEFICode, got.UEFIVars = pickUEFI(tc.codes, tc.present)
			got.QBoot = findQBoot("x86_64", tc.emulator, tc.present)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("mismatch (-want +got):\n%s", diff)
			}
		})
	}
}
