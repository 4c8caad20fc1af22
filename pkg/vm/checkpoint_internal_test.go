package vm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/vmpod/vmpod/pkg/host"
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

// A checkpoint restores where the node's QEMU offers the machine type it
// ran on, and a pod may name that type instead of the spec's alias.
func TestRestoreMachine(t *testing.T) {
	h := host.Host{Emulator: "/usr/bin/qemu-system-x86_64", Machines: []string{"q35", "pc-q35-7.2", "pc-q35-7.1"}}
	for _, c := range []struct {
		machine string
		host    host.Host
		refused bool
	}{
		{"pc-q35-7.2", h, false},
		{"pc-q35-7.1", h, false},
		{"", h, false},                     // taken before vmpod recorded it
		{"pc-q35-8.2", host.Host{}, false}, // a node that lists none
		{"pc-q35-8.2", h, true},
	} {
		err := checkNodeMachine(c.machine, c.host)
		if !c.refused {
			if err != nil {
				t.Errorf("machine %q: %v", c.machine, err)
			}
			continue
		}
		if !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), `vmpod.io/machine: "pc-q35-8.2"`) ||
			!strings.Contains(err.Error(), "machine.vmpod.io/pc-q35-8.2=true") {
			t.Errorf("machine %q on a node without it: %v; want FailedPrecondition naming the annotation and the label", c.machine, err)
		}
	}

	m := Manifest{Machine: "pc-q35-7.2", Spec: vmspec.Spec{Machine: "q35"}}
	for _, c := range []struct {
		pod     string
		refused bool
	}{{"q35", false}, {"pc-q35-7.2", false}, {"pc-q35-7.1", true}, {"pc", true}} {
		err := checkRestorable(m, vmspec.Spec{Machine: c.pod})
		if (err != nil) != c.refused || (c.refused && !errdefs.IsFailedPrecondition(err)) {
			t.Errorf("a pod asking machine %q of a checkpoint of q35 (pc-q35-7.2): %v, refused: want %v", c.pod, err, c.refused)
		}
	}

	// Room in DIMM slots is other hardware than room in virtio-mem; ""
	// is virtio-mem, and without room the annotation changes nothing.
	room := vmspec.Spec{Machine: "q35", MemoryBytes: 256 << 20, MaxMemoryBytes: 512 << 20}
	dimm := room
	dimm.MemoryHotplug = vmspec.MemoryHotplugDIMM
	virtioMem := room
	virtioMem.MemoryHotplug = vmspec.MemoryHotplugVirtioMem
	noRoom := vmspec.Spec{Machine: "q35", MemoryBytes: 256 << 20, MemoryHotplug: vmspec.MemoryHotplugDIMM}
	for _, c := range []struct {
		saved, pod vmspec.Spec
		refused    bool
	}{
		{room, virtioMem, false}, {dimm, dimm, false}, {room, dimm, true}, {dimm, virtioMem, true},
		{vmspec.Spec{Machine: "q35", MemoryBytes: 256 << 20}, noRoom, false},
	} {
		err := checkRestorable(Manifest{Spec: c.saved}, c.pod)
		if (err != nil) != c.refused || (c.refused && !strings.Contains(err.Error(), vmspec.AnnotationMemoryHotplug)) {
			t.Errorf("a pod with memory hotplug %q of a checkpoint with %q: %v, refused: want %v", c.pod.MemoryHotplug, c.saved.MemoryHotplug, err, c.refused)
		}
	}
}
