package host

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/vmpod/vmpod/internal/testenv/hostcaps"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden.json from Parse's output")

// debianFiles stands in for os.Stat on a Debian 12 node with the ovmf and
// qemu-system-data packages, so golden files do not depend on the machine
// that runs the tests.
func debianFiles(p string) bool {
	switch p {
	case "/usr/share/OVMF/OVMF_CODE_4M.fd", "/usr/share/OVMF/OVMF_VARS_4M.fd",
		"/usr/share/OVMF/OVMF_CODE_4M.ms.fd", "/usr/share/OVMF/OVMF_VARS_4M.ms.fd",
		"/usr/share/OVMF/OVMF_CODE_4M.secboot.fd",
		"/usr/share/qemu/qboot.rom":
		return true
	}
	return false
}

// TestParseGolden runs Parse on each testdata/<name>.caps.xml with its
// <name>.domcaps.xml, if any (the test driver has none), and compares the
// result with <name>.golden.json.
func TestParseGolden(t *testing.T) {
	for _, name := range hostcaps.Names(t) {
		t.Run(name, func(t *testing.T) {
			got, err := Parse(hostcaps.Caps(t, name), hostcaps.DomCaps(t, name), WithFiles(debianFiles))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}

			if *update {
				b, err := json.MarshalIndent(got, "", "  ")
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(hostcaps.GoldenPath(t, name), append(b, '\n'), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want := hostcaps.Golden[Host](t, name)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Parse(%s) mismatch (-want +got):\n%s", name, diff)
			}
		})
	}
}

// TestParseWithoutExtras checks what Parse makes of the TCG capture when
// parts are left out: no domain capabilities (MaxVCPUs from the default
// machine type) and no WithFiles (firmware as libvirt names it, no qboot).
func TestParseWithoutExtras(t *testing.T) {
	caps := hostcaps.Caps(t, hostcaps.TCG)
	domCaps := hostcaps.DomCaps(t, hostcaps.TCG)
	type summary struct {
		MaxVCPUs  int
		HostModel string
		CPUModels int
		Firmware  Firmware
	}
	sum := func(h Host) summary {
		return summary{h.MaxVCPUs, h.HostModel.Model, len(h.CPUModels), h.Firmware}
	}
	tests := []struct {
		name    string
		domCaps []byte
		opts    []Option
		want    summary
	}{
		{
			name: "caps only",
			want: summary{MaxVCPUs: 255},
		},
		{
			name:    "no WithFiles",
			domCaps: domCaps,
			want: summary{MaxVCPUs: 255, HostModel: "EPYC", CPUModels: 18, Firmware: Firmware{
				UEFICode: "/usr/share/OVMF/OVMF_CODE_4M.fd",
				UEFIVars: "/usr/share/OVMF/OVMF_VARS_4M.fd",
				UEFIAuto: true,
			}},
		},
		{
			name:    "no firmware files",
			domCaps: domCaps,
			opts:    []Option{WithFiles(func(string) bool { return false })},
			want:    summary{MaxVCPUs: 255, HostModel: "EPYC", CPUModels: 18, Firmware: Firmware{UEFIAuto: true}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, err := Parse(caps, tc.domCaps, tc.opts...)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if diff := cmp.Diff(tc.want, sum(h)); diff != "" {
				t.Errorf("mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// capsXML builds a minimal capabilities document: a host arch and one
// guest per "os_type/arch/domain type" triple.
func capsXML(hostArch string, guests ...string) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "<capabilities><host><cpu><arch>%s</arch></cpu></host>", hostArch)
	for _, g := range guests {
		f := strings.Split(g, "/")
		fmt.Fprintf(&b, "<guest><os_type>%s</os_type><arch name='%s'><domain type='%s'/></arch></guest>", f[0], f[1], f[2])
	}
	b.WriteString("</capabilities>")
	return []byte(b.String())
}

func domCapsXML(arch, domain string) []byte {
	return fmt.Appendf(nil, "<domainCapabilities><domain>%s</domain><arch>%s</arch></domainCapabilities>", domain, arch)
}

func TestParseErrors(t *testing.T) {
	kvmCaps := capsXML("x86_64", "hvm/x86_64/qemu", "hvm/x86_64/kvm")
	tests := []struct {
		name    string
		caps    []byte
		domCaps []byte
		want    string
	}{
		{name: "empty caps", caps: nil, want: "capabilities: empty document"},
		{name: "blank caps", caps: []byte(" \n"), want: "capabilities: empty document"},
		{name: "garbage caps", caps: []byte("<capabilities><host>"), want: "capabilities: XML syntax error on line 1: unexpected EOF"},
		{name: "other root element", caps: domCapsXML("x86_64", "kvm"), want: "capabilities: expected element type <capabilities> but have <domainCapabilities>"},
		{name: "no host arch", caps: []byte("<capabilities><host/></capabilities>"), want: "capabilities: no <host><cpu><arch>"},
		{name: "no hvm guest", caps: capsXML("x86_64", "xen/x86_64/qemu"), want: "capabilities: no hvm guest for arch x86_64"},
		{name: "hvm guest for other arch only", caps: capsXML("x86_64", "hvm/aarch64/qemu"), want: "capabilities: no hvm guest for arch x86_64"},
		{
			name: "bad memory unit",
			caps: []byte("<capabilities><host><cpu><arch>x86_64</arch></cpu><topology><cells><cell id='0'><memory unit='parsecs'>1</memory></cell></cells></topology></host>" +
				"<guest><os_type>hvm</os_type><arch name='x86_64'><domain type='qemu'/></arch></guest></capabilities>"),
			want: `capabilities: NUMA cell 0 memory: unknown unit "parsecs"`,
		},
		{
			name: "memory overflows",
			caps: []byte("<capabilities><host><cpu><arch>x86_64</arch></cpu><topology><cells><cell id='3'><memory unit='EiB'>16</memory></cell></cells></topology></host>" +
				"<guest><os_type>hvm</os_type><arch name='x86_64'><domain type='qemu'/></arch></guest></capabilities>"),
			want: "capabilities: NUMA cell 3 memory: 16 EiB overflows 64 bits",
		},
		{name: "garbage domcaps", caps: kvmCaps, domCaps: []byte("<<<"), want: "domain capabilities: XML syntax error on line 1: expected element name after <"},
		{name: "domcaps other arch", caps: kvmCaps, domCaps: domCapsXML("aarch64", "kvm"), want: `domain capabilities: arch "aarch64", want the host arch "x86_64"`},
		{name: "domcaps not the best accel", caps: kvmCaps, domCaps: domCapsXML("x86_64", "qemu"), want: `domain capabilities: for domain type "qemu", want "kvm" (the best accelerator)`},
		{
			name:    "domcaps but no kvm or qemu",
			caps:    capsXML("i686", "hvm/i686/test"),
			domCaps: domCapsXML("i686", "test"),
			want:    `domain capabilities: for domain type "test", but capabilities offer neither kvm nor qemu`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.caps, tc.domCaps)
			got := "<nil>"
			if err != nil {
				got = err.Error()
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Parse error mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestParseWithoutKVM: where the KVM probe failed, the node runs TCG even
// though libvirt offers KVM, and the Host keeps the probe's reason.
func TestParseWithoutKVM(t *testing.T) {
	caps := hostcaps.Caps(t, hostcaps.KVM)
	tcgDomCaps := hostcaps.DomCaps(t, hostcaps.TCG)
	if _, err := Parse(caps, tcgDomCaps); err == nil {
		t.Fatal("KVM capabilities with TCG domain capabilities parsed without WithoutKVM")
	}
	const reason = "a guest under KVM failed: QEMU exited with status 1"
	h, err := Parse(caps, tcgDomCaps, WithoutKVM(reason))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]Accel{AccelTCG}, h.Accels); diff != "" {
		t.Errorf("Accels (-want +got):\n%s", diff)
	}
	if h.KVMReason != reason || h.HostPassthrough {
		t.Errorf("KVMReason %q, HostPassthrough %v; want %q, false", h.KVMReason, h.HostPassthrough, reason)
	}
}
