package cri

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/errdefs"
)

// FuzzReadPodCheckpoint: any index bytes in a RestorePod dir are read
// without a panic; every refusal is InvalidArgument, and what is accepted
// has one container whose name is a plain file name (the dir it names
// stays inside the checkpoint). Seeds in testdata/fuzz/FuzzReadPodCheckpoint.
func FuzzReadPodCheckpoint(f *testing.F) {
	good, err := json.Marshal(podCheckpoint{Version: podCheckpointVersion, Pod: podCheckpointPod{Name: "web", Namespace: "default", UID: "u"},
		RuntimeHandler: "vmpod", Containers: []podCheckpointContainer{{Name: "vm", Image: "img", ImageID: "sha256:00"}}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Fuzz(func(t *testing.T, index []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, podCheckpointIndex), index, 0o600); err != nil {
			t.Fatal(err)
		}
		p, err := readPodCheckpoint("restore", dir)
		if err != nil {
			if !errdefs.IsInvalidArgument(err) {
				t.Fatalf("refusal %v is not InvalidArgument", err)
			}
			return
		}
		if p.Version != podCheckpointVersion || len(p.Containers) != 1 {
			t.Fatalf("accepted %+v", p)
		}
		name := p.Containers[0].Name
		if filepath.Dir(filepath.Join(dir, name)) != dir {
			t.Fatalf("accepted container name %q, which leaves the checkpoint dir", name)
		}
	})
}
