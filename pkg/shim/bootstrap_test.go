package shim

import (
	"testing"

	bootapi "github.com/containerd/containerd/api/runtime/bootstrap/v1"
	runcoptions "github.com/containerd/containerd/api/types/runc/options"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// TestIsBootstrap: only a BootstrapParams for this very task is the new
// protocol; what containerd 1.7 and CRI-O put on stdin (nothing, or the
// runtime options as an Any) is not.
func TestIsBootstrap(t *testing.T) {
	mustMarshal := func(m proto.Message) []byte {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	opts, err := anypb.New(&runcoptions.Options{BinaryName: "runc", SystemdCgroup: true})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		input []byte
		want  bool
	}{
		{"empty (containerd 1.7, CRI-O)", nil, false},
		{"runtime options (containerd 1.7 with options)", mustMarshal(opts), false},
		{"not protobuf", []byte("{\"version\":2}"), false},
		{"params for another task", mustMarshal(&bootapi.BootstrapParams{InstanceID: "other", Namespace: "k8s.io"}), false},
		{"params for another namespace", mustMarshal(&bootapi.BootstrapParams{InstanceID: "sbx", Namespace: "default"}), false},
		{"params for this task (containerd 2.3+)", mustMarshal(&bootapi.BootstrapParams{InstanceID: "sbx", Namespace: "k8s.io"}), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := isBootstrap(tc.input, "sbx", "k8s.io"); got != tc.want {
				t.Errorf("isBootstrap = %v, want %v", got, tc.want)
			}
		})
	}
}
