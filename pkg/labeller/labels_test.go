package labeller_test

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/vmpod/vmpod/internal/testenv/hostcaps"
	"github.com/vmpod/vmpod/pkg/host"
	"github.com/vmpod/vmpod/pkg/labeller"
	"github.com/vmpod/vmpod/pkg/vmspec"
)

var update = flag.Bool("update", false, "rewrite testdata/*.labels.json from Labels' output")

// TestLabelsGolden turns each pkg/host/testdata/<name>.golden.json Host
// into labels and compares them with testdata/<name>.labels.json.
func TestLabelsGolden(t *testing.T) {
	for _, name := range hostcaps.Names(t) {
		t.Run(name, func(t *testing.T) {
			got, skipped := labeller.Desired(hostcaps.Golden[host.Host](t, name))
			if len(skipped) > 0 {
				t.Errorf("skipped %v, want none from real capabilities", skipped)
			}
			assertValid(t, got)

			golden := filepath.Join("testdata", name+".labels.json")
			if *update {
				b, err := json.MarshalIndent(got, "", "  ")
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(golden, append(b, '\n'), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			b, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./pkg/labeller -update)", err)
			}
			var want map[string]string
			if err := json.Unmarshal(b, &want); err != nil {
				t.Fatalf("%s: %v", golden, err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Labels (-want +got):\n%s", diff)
			}
		})
	}
}

// assertValid checks what the API server would: qualified names and
// label values. And that the labeller owns every key it sets.
func assertValid(t *testing.T, labels map[string]string) {
	t.Helper()
	for k, v := range labels {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			t.Errorf("key %q: %v", k, errs)
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			t.Errorf("label %s=%q: %v", k, v, errs)
		}
		if !labeller.Owns(k) {
			t.Errorf("label %s is not owned by the labeller", k)
		}
	}
}

func TestLabels(t *testing.T) {
	long := strings.Repeat("x", 64)
	tests := []struct {
		name        string
		host        host.Host
		want        map[string]string
		wantSkipped []string // keys
	}{
		{
			name: "nothing usable",
			host: host.Host{Arch: "i686"},
			want: map[string]string{
				vmspec.LabelRuntime: "false", vmspec.LabelKVM: "false", vmspec.LabelTCG: "false",
				vmspec.LabelHostPassthrough: "false", vmspec.LabelUEFI: "false",
			},
		},
		{
			name: "kvm and tcg",
			host: host.Host{
				Accels: []host.Accel{host.AccelKVM, host.AccelTCG}, HostPassthrough: true, MaxVCPUs: 288,
				HostModel: host.CPU{Model: "Skylake-Client-IBRS", Features: []string{"sse4.1", "tsc_adjust"}},
				CPUModels: []string{"486", "Skylake-Client"},
				Machines:  []string{"pc-q35-7.2", "q35"},
				Firmware:  host.Firmware{UEFICode: "/code.fd", UEFIVars: "/vars.fd"},
			},
			want: map[string]string{
				vmspec.LabelRuntime: "true", vmspec.LabelKVM: "true", vmspec.LabelTCG: "true",
				vmspec.LabelHostPassthrough: "true", vmspec.LabelUEFI: "true",
				vmspec.LabelMaxVCPUs: "288", vmspec.LabelHostCPUModel: "Skylake-Client-IBRS",
				"cpu-feature.vmpod.io/sse4.1":       "true",
				"cpu-feature.vmpod.io/tsc_adjust":   "true",
				"cpu-model.vmpod.io/486":            "true",
				"cpu-model.vmpod.io/Skylake-Client": "true",
				"machine.vmpod.io/pc-q35-7.2":       "true",
				"machine.vmpod.io/q35":              "true",
			},
		},
		{
			name: "UEFI code without vars is no UEFI",
			host: host.Host{Accels: []host.Accel{host.AccelTCG}, Firmware: host.Firmware{UEFICode: "/code.fd", UEFIAuto: true}},
			want: map[string]string{
				vmspec.LabelRuntime: "true", vmspec.LabelKVM: "false", vmspec.LabelTCG: "true",
				vmspec.LabelHostPassthrough: "false", vmspec.LabelUEFI: "false",
			},
		},
		{
			name: "names labels cannot hold are skipped, never rewritten",
			host: host.Host{
				Accels:    []host.Accel{host.AccelTCG},
				HostModel: host.CPU{Model: "My CPU", Features: []string{"avx2", "bad/name", "-lead", long}},
				CPUModels: []string{"qemu64", "Model (v2)"},
				Machines:  []string{"q35", "pc_" + long},
			},
			want: map[string]string{
				vmspec.LabelRuntime: "true", vmspec.LabelKVM: "false", vmspec.LabelTCG: "true",
				vmspec.LabelHostPassthrough: "false", vmspec.LabelUEFI: "false",
				"cpu-feature.vmpod.io/avx2": "true",
				"cpu-model.vmpod.io/qemu64": "true",
				"machine.vmpod.io/q35":      "true",
			},
			wantSkipped: []string{
				vmspec.LabelHostCPUModel,
				"cpu-model.vmpod.io/Model (v2)",
				"cpu-feature.vmpod.io/bad/name", "cpu-feature.vmpod.io/-lead", "cpu-feature.vmpod.io/" + long,
				"machine.vmpod.io/pc_" + long,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, skipped := labeller.Desired(tt.host)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Desired labels (-want +got):\n%s", diff)
			}
			var gotSkipped []string
			for _, s := range skipped {
				if s.Reason == "" {
					t.Errorf("skipped %s without a reason", s.Key)
				}
				gotSkipped = append(gotSkipped, s.Key)
			}
			if diff := cmp.Diff(tt.wantSkipped, gotSkipped); diff != "" {
				t.Errorf("skipped (-want +got):\n%s", diff)
			}
			assertValid(t, got)
			if diff := cmp.Diff(got, labeller.Labels(tt.host)); diff != "" {
				t.Errorf("Labels differs from Desired (-Desired +Labels):\n%s", diff)
			}
		})
	}
}

func TestOwns(t *testing.T) {
	owned := []string{
		vmspec.LabelRuntime, vmspec.LabelKVM, vmspec.LabelTCG, vmspec.LabelHostPassthrough,
		vmspec.LabelUEFI, vmspec.LabelMaxVCPUs, vmspec.LabelHostCPUModel,
		vmspec.LabelCPUModelPrefix + "EPYC", vmspec.LabelCPUFeaturePrefix + "avx2",
		vmspec.LabelMachinePrefix + "q35",
	}
	// Every prefix vmspec lists but the shared vmpod.io/ is the labeller's
	// whole.
	for _, p := range vmspec.LabelPrefixes {
		if p != vmspec.Prefix {
			owned = append(owned, p+"anything")
		}
	}
	for _, k := range owned {
		if !labeller.Owns(k) {
			t.Errorf("Owns(%q) = false, want true", k)
		}
	}
	for _, k := range []string{
		"vmpod.io/pool",        // an admin's own label under the shared prefix
		vmspec.AnnotationAccel, // an annotation key, never a node label of ours
		"example.com/kvm",      // looks like ours
		"kvm",                  // no prefix
		"vmpod.io/kvm-extra",   // a longer key
		"xvmpod.io/kvm",        // a longer prefix
		"cpu-model.vmpod.io/",  // the bare prefix is no key
		"sub.cpu-model.vmpod.io/x",
		"kubernetes.io/hostname",
		"node.kubernetes.io/instance-type",
	} {
		if labeller.Owns(k) {
			t.Errorf("Owns(%q) = true, want false", k)
		}
	}
}
