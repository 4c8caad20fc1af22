package vm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/vmpod/vmpod/pkg/vmspec"
)

// A guest with state a checkpoint cannot carry is refused, naming it.
func TestCheckpointable(t *testing.T) {
	for _, c := range []struct {
		name string
		spec vmspec.Spec
		want []string // in the error; none: accepted
	}{
		{name: "no volumes", spec: vmspec.Spec{Name: "a"}},
		{name: "shares", spec: vmspec.Spec{Shares: []vmspec.Share{{Tag: "vmpod:a_1", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"}, {Tag: "vmpod:b_2", MountPath: "/data"}}},
			want: []string{"virtio-fs", "/var/run/secrets/kubernetes.io/serviceaccount, /data", "automountServiceAccountToken: false"}},
		{name: "block volumes", spec: vmspec.Spec{Volumes: []vmspec.Volume{{Name: "db"}}},
			want: []string{"block volumes (db)"}},
		{name: "both", spec: vmspec.Spec{Volumes: []vmspec.Volume{{Name: "db"}}, Shares: []vmspec.Share{{MountPath: "/data"}}},
			want: []string{"(/data)", "; and it has block volumes (db)"}},
	} {
		err := checkpointable(c.spec)
		if len(c.want) == 0 {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		if !errdefs.IsFailedPrecondition(err) {
			t.Errorf("%s: %v, want FailedPrecondition", c.name, err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v; want it to say %q", c.name, err, w)
			}
		}
	}
}

// copySparse keeps the content and leaves the zeros as holes.
func TestCopySparse(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	data := make([]byte, 5<<20+123)
	copy(data, "head")
	copy(data[3<<20:], "middle")
	data[len(data)-1] = 'z'
	if err := os.WriteFile(src, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := copySparse(src, dst); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(dst)
	if err != nil || string(got) != string(data) {
		t.Fatalf("copy differs (%d bytes of %d): %v", len(got), len(data), err)
	}
	if err := copySparse(src, dst); err == nil {
		t.Error("a copy over an existing file succeeded")
	}
	sd, sw := usedBytes(t, dst), int64(len(data))
	if sd >= sw/2 {
		t.Errorf("the copy uses %d bytes on disk for %d of mostly zeros", sd, sw)
	}
}

func usedBytes(t *testing.T, path string) int64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}
