package vmplacement_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/vmpod/vmpod/pkg/scheduler/vmplacement"
)

func TestValidateAndDefault(t *testing.T) {
	w := func(v int64) *int64 { return &v }
	tests := []struct {
		name string
		in   vmplacement.VMPlacementArgs
		want vmplacement.VMPlacementArgs
		// wantErrs are the problems the error names, each a substring.
		wantErrs []string
	}{
		{
			name: "empty gets every default",
			want: vmplacement.VMPlacementArgs{
				RuntimeClassNames: []string{"vmpod", "vmpod-small"}, Strategy: vmplacement.StrategySpread,
				ImageLocalityWeight: w(1), StrategyWeight: w(1),
			},
		},
		{
			name: "set fields are kept",
			in: vmplacement.VMPlacementArgs{
				RuntimeClassNames: []string{"vmpod", "vmpod-kvm"}, Strategy: vmplacement.StrategyPack,
				ImageLocalityWeight: w(0), StrategyWeight: w(100),
			},
			want: vmplacement.VMPlacementArgs{
				RuntimeClassNames: []string{"vmpod", "vmpod-kvm"}, Strategy: vmplacement.StrategyPack,
				ImageLocalityWeight: w(0), StrategyWeight: w(100),
			},
		},
		{
			name:     "unknown strategy",
			in:       vmplacement.VMPlacementArgs{Strategy: "binpack"},
			wantErrs: []string{`strategy: "binpack" is not one of spread, pack`},
		},
		{
			name:     "RuntimeClass names",
			in:       vmplacement.VMPlacementArgs{RuntimeClassNames: []string{"vmpod", "VMPod", "", "vmpod"}},
			wantErrs: []string{`runtimeClassNames[1]: "VMPod" is not a RuntimeClass name`, `runtimeClassNames[2]: "" is not a RuntimeClass name`, `runtimeClassNames[3]: "vmpod" is listed twice`},
		},
		{
			name:     "weights out of range",
			in:       vmplacement.VMPlacementArgs{ImageLocalityWeight: w(-1), StrategyWeight: w(101)},
			wantErrs: []string{"imageLocalityWeight: -1 is not in 0..100", "strategyWeight: 101 is not in 0..100"},
		},
		{
			name:     "both weights 0",
			in:       vmplacement.VMPlacementArgs{ImageLocalityWeight: w(0), StrategyWeight: w(0)},
			wantErrs: []string{"imageLocalityWeight, strategyWeight: both are 0"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.in
			err := vmplacement.ValidateAndDefault(&args)
			if len(tc.wantErrs) == 0 {
				if err != nil {
					t.Fatalf("ValidateAndDefault: %v", err)
				}
				if diff := cmp.Diff(tc.want, args); diff != "" {
					t.Errorf("defaulted args (-want +got):\n%s", diff)
				}
				return
			}
			if err == nil {
				t.Fatalf("ValidateAndDefault succeeded, want errors %q", tc.wantErrs)
			}
			if got := strings.Count(err.Error(), "\n") + 1; got != len(tc.wantErrs) {
				t.Errorf("%d problems reported, want %d:\n%v", got, len(tc.wantErrs), err)
			}
			for _, want := range tc.wantErrs {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error does not say %q:\n%v", want, err)
				}
			}
		})
	}
}

// TestNewArgs decodes args as kube-scheduler hands them over.
func TestNewArgs(t *testing.T) {
	tests := []struct {
		name    string
		args    runtime.Object
		wantErr string // substring; "" for success
	}{
		{name: "no pluginConfig entry", args: nil},
		{name: "empty args", args: &runtime.Unknown{}},
		{name: "JSON", args: &runtime.Unknown{Raw: []byte(`{"strategy":"pack","runtimeClassNames":["vmpod"]}`), ContentType: runtime.ContentTypeJSON}},
		{name: "JSON without content type", args: &runtime.Unknown{Raw: []byte(`{"strategy":"pack"}`)}},
		{name: "YAML", args: &runtime.Unknown{Raw: []byte("strategy: pack\nstrategyWeight: 2\n"), ContentType: runtime.ContentTypeYAML}},
		{
			name:    "misspelt field",
			args:    &runtime.Unknown{Raw: []byte(`{"stratgy":"pack"}`)},
			wantErr: `VMPlacement args: unknown field "stratgy"`,
		},
		{
			name:    "field in the wrong case",
			args:    &runtime.Unknown{Raw: []byte(`{"Strategy":"pack"}`)},
			wantErr: `unknown field "Strategy"`,
		},
		{
			name:    "wrong type",
			args:    &runtime.Unknown{Raw: []byte(`{"strategyWeight":"high"}`)},
			wantErr: "VMPlacement args: json: cannot unmarshal string",
		},
		{
			name:    "invalid value",
			args:    &runtime.Unknown{Raw: []byte(`{"strategy":"binpack"}`)},
			wantErr: `VMPlacement args: strategy: "binpack" is not one of spread, pack`,
		},
		{
			name:    "not runtime.Unknown",
			args:    &v1.ConfigMap{},
			wantErr: "want args of type *runtime.Unknown",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := vmplacement.New(context.Background(), tc.args, nil)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("New: %v", err)
			case tc.wantErr != "" && err == nil:
				t.Fatalf("New succeeded, want error %q", tc.wantErr)
			case tc.wantErr != "" && !strings.Contains(err.Error(), tc.wantErr):
				t.Errorf("New: %v\nwant error containing %q", err, tc.wantErr)
			}
		})
	}
}
