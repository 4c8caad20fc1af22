package vm

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/errdefs"

	"github.com/vmpod/vmpod/pkg/vmspec"
)

// FuzzReadCheckpoint: any manifest bytes, next to a small state file, are
// read without a panic, and accepted only when they name a valid spec and
// the state file's true size and SHA-256; every refusal is
// InvalidArgument. Seeds in testdata/fuzz/FuzzReadCheckpoint.
func FuzzReadCheckpoint(f *testing.F) {
	state := []byte("not really a save image")
	sum := sha256.Sum256(state)
	good := Manifest{Version: ManifestVersion, Domain: "default_web",
		Spec:  vmspec.Spec{Name: "default_web", Image: "img", VCPUs: 1, MemoryBytes: 256 << 20, Accel: vmspec.AccelAuto},
		Files: map[string]FileSum{CheckpointState: {Bytes: int64(len(state)), SHA256: hex.EncodeToString(sum[:])}}}
	data, err := json.Marshal(good)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	f.Add([]byte(`{"version":1}`))
	f.Add([]byte(`{"version":2,"files":{"vm.state":{"bytes":1,"sha256":"00"}}}`))
	f.Fuzz(func(t *testing.T, manifest []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, CheckpointState), state, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, CheckpointManifest), manifest, 0o600); err != nil {
			t.Fatal(err)
		}
		m, err := ReadCheckpoint(dir)
		if err != nil {
			if !errdefs.IsInvalidArgument(err) {
				t.Fatalf("refusal %v is not InvalidArgument", err)
			}
			return
		}
		if got := m.Files[CheckpointState]; got != good.Files[CheckpointState] {
			t.Fatalf("accepted a manifest whose state file is %+v, not the file's %+v", got, good.Files[CheckpointState])
		}
		if err := m.Spec.Validate(); err != nil {
			t.Fatalf("accepted a manifest with an invalid spec: %v", err)
		}
	})
}
