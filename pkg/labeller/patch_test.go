package labeller_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/vmpod/vmpod/pkg/labeller"
)

func TestDiff(t *testing.T) {
	foreign := map[string]string{
		"kubernetes.io/hostname": "n1",
		"example.com/kvm":        "true",
		"vmpod.io/pool":          "gold",
	}
	with := func(m map[string]string, kv ...string) map[string]string {
		out := map[string]string{}
		for k, v := range m {
			out[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	tests := []struct {
		name             string
		current, desired map[string]string
		want             labeller.Change
		wantPatch        string
	}{
		{
			name:      "new node",
			current:   nil,
			desired:   map[string]string{"vmpod.io/kvm": "false", "machine.vmpod.io/q35": "true"},
			want:      labeller.Change{Set: map[string]string{"vmpod.io/kvm": "false", "machine.vmpod.io/q35": "true"}},
			wantPatch: `{"metadata":{"labels":{"machine.vmpod.io/q35":"true","vmpod.io/kvm":"false"}}}`,
		},
		{
			name:    "in step",
			current: with(foreign, "vmpod.io/kvm", "true", "cpu-model.vmpod.io/EPYC", "true"),
			desired: map[string]string{"vmpod.io/kvm": "true", "cpu-model.vmpod.io/EPYC": "true"},
			want:    labeller.Change{},
		},
		{
			name: "change, add and remove stale; foreign untouched",
			current: with(foreign, "vmpod.io/kvm", "false", "vmpod.io/max-vcpus", "255",
				"cpu-model.vmpod.io/qemu64", "true", "cpu-feature.vmpod.io/avx512f", "true"),
			desired: map[string]string{"vmpod.io/kvm": "true", "cpu-model.vmpod.io/EPYC": "true"},
			want: labeller.Change{
				Set:    map[string]string{"vmpod.io/kvm": "true", "cpu-model.vmpod.io/EPYC": "true"},
				Remove: []string{"cpu-feature.vmpod.io/avx512f", "cpu-model.vmpod.io/qemu64", "vmpod.io/max-vcpus"},
			},
			wantPatch: `{"metadata":{"labels":{"cpu-feature.vmpod.io/avx512f":null,"cpu-model.vmpod.io/EPYC":"true",` +
				`"cpu-model.vmpod.io/qemu64":null,"vmpod.io/kvm":"true","vmpod.io/max-vcpus":null}}}`,
		},
		{
			name:    "desired keys it does not own are ignored",
			current: foreign,
			desired: map[string]string{"vmpod.io/pool": "silver", "example.com/kvm": "false"},
			want:    labeller.Change{},
		},
		{
			name:      "a hand-set owned label is corrected",
			current:   with(foreign, "vmpod.io/kvm", "yes"),
			desired:   map[string]string{"vmpod.io/kvm": "false"},
			want:      labeller.Change{Set: map[string]string{"vmpod.io/kvm": "false"}},
			wantPatch: `{"metadata":{"labels":{"vmpod.io/kvm":"false"}}}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := labeller.Diff(tt.current, tt.desired)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Diff (-want +got):\n%s", diff)
			}
			if got.Empty() != (tt.wantPatch == "") {
				t.Errorf("Empty() = %v with patch %q", got.Empty(), tt.wantPatch)
			}
			if tt.wantPatch == "" {
				return
			}
			patch, err := got.MergePatch()
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.wantPatch, string(patch)); diff != "" {
				t.Errorf("MergePatch (-want +got):\n%s", diff)
			}
		})
	}
}
