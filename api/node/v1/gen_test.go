package node

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/vmpod/vmpod/internal/testenv/repo"
)

// TestGenerated: the committed Go code is what hack/gen-api.sh makes of
// node.proto now.
func TestGenerated(t *testing.T) {
	if _, err := exec.LookPath("protoc"); err != nil {
		t.Fatalf("protoc is missing (hack/install-deps.sh installs protobuf-compiler): %v", err)
	}
	root := repo.Root(t)
	out := t.TempDir()
	cmd := exec.Command(filepath.Join(root, "hack", "gen-api.sh"), out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/gen-api.sh: %v\n%s", err, b)
	}
	for _, name := range []string{"node.pb.go", "node_ttrpc.pb.go"} {
		want, err := os.ReadFile(filepath.Join(out, "node", "v1", name))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(root, "api", "node", "v1", name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(want, got) {
			t.Errorf("api/node/v1/%s is not what hack/gen-api.sh generates from node.proto: run it and commit the result", name)
		}
	}
}
