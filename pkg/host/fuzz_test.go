package host

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// FuzzParse feeds Parse whatever libvirt (or a corrupted cache of its
// output) may hand it. Seeds live in testdata/fuzz/FuzzParse and come from
// the captured documents. What Parse accepts must be a Host the rest of
// vmpod can trust:
//
//   - Parse is a function of its input: a second call gives the same Host;
//   - accelerators are kvm and qemu only, once each, the best first;
//   - machine types, CPU models and features are sorted sets of names,
//     none empty or padded;
//   - UEFI code and vars come together, are files WithFiles says exist,
//     and the code is not a secure-boot build; qboot is a file that
//     exists, and only where QEMU runs guests;
//   - domain capabilities only add: the capabilities alone parse too and
//     give the same arch, accelerators, machines, host CPU and memory;
//   - WithoutKVM leaves kvm out and keeps the reason.
func FuzzParse(f *testing.F) {
	f.Fuzz(func(t *testing.T, caps, domCaps []byte) {
		h, err := Parse(caps, domCaps, WithFiles(debianFiles))
		if err != nil {
			return
		}
		again, err := Parse(caps, domCaps, WithFiles(debianFiles))
		if err != nil {
			t.Fatalf("second Parse failed: %v", err)
		}
		if diff := cmp.Diff(h, again); diff != "" {
			t.Fatalf("Parse is not deterministic (-first +second):\n%s", diff)
		}

		if h.Arch == "" {
			t.Errorf("Host without Arch")
		}
		if !slices.Equal(h.Accels, []Accel{AccelKVM, AccelTCG}) && !slices.Equal(h.Accels, []Accel{AccelKVM}) &&
			!slices.Equal(h.Accels, []Accel{AccelTCG}) && len(h.Accels) > 0 {
			t.Errorf("Accels = %q, want kvm and qemu at most once each, kvm first", h.Accels)
		}
		for what, names := range map[string][]string{
			"Machines": h.Machines, "CPUModels": h.CPUModels,
			"CPU.Features": h.CPU.Features, "HostModel.Features": h.HostModel.Features,
		} {
			if !slices.IsSorted(names) || len(slices.Compact(slices.Clone(names))) != len(names) {
				t.Errorf("%s = %q, want a sorted set", what, names)
			}
			for _, n := range names {
				if n == "" || strings.TrimSpace(n) != n {
					t.Errorf("%s has the name %q", what, n)
				}
			}
		}

		fw := h.Firmware
		if (fw.UEFICode == "") != (fw.UEFIVars == "") {
			t.Errorf("UEFI code %q without vars %q, or vars without code", fw.UEFICode, fw.UEFIVars)
		}
		for _, p := range []string{fw.UEFICode, fw.UEFIVars, fw.QBoot} {
			if p != "" && !debianFiles(p) {
				t.Errorf("firmware %q is not a file on the node", p)
			}
		}
		if fw.UEFICode != "" && isSecureBoot(fw.UEFICode) {
			t.Errorf("UEFI code %q is a secure-boot build", fw.UEFICode)
		}
		if fw.QBoot != "" && len(h.Accels) == 0 {
			t.Errorf("qboot %q on a node whose QEMU runs no guests", fw.QBoot)
		}

		capsOnly, err := Parse(caps, nil, WithFiles(debianFiles))
		if err != nil {
			t.Fatalf("capabilities parse with domain capabilities but not alone: %v", err)
		}
		type fromCaps struct {
			Arch        string
			Accels      []Accel
			Machines    []string
			CPU         CPU
			MemoryBytes uint64
			CPUs        int
		}
		if diff := cmp.Diff(fromCaps{h.Arch, h.Accels, h.Machines, h.CPU, h.MemoryBytes, h.CPUs},
			fromCaps{capsOnly.Arch, capsOnly.Accels, capsOnly.Machines, capsOnly.CPU, capsOnly.MemoryBytes, capsOnly.CPUs}); diff != "" {
			t.Errorf("domain capabilities changed what the capabilities say (-with +without):\n%s", diff)
		}

		if noKVM, err := Parse(caps, domCaps, WithFiles(debianFiles), WithoutKVM("probe failed")); err == nil {
			if noKVM.HasAccel(AccelKVM) || noKVM.KVMReason != "probe failed" {
				t.Errorf("WithoutKVM: Accels %q, KVMReason %q", noKVM.Accels, noKVM.KVMReason)
			}
		}
	})
}
