package containerd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestContainerd17 brings up containerd 1.7 through the same harness: its
// version 2 config is understood (CRI ready on the test's socket, the
// pinned sandbox image imported), and Close leaves nothing behind.
func TestContainerd17(t *testing.T) {
	hostBefore := hostDefaults()
	c := Start(t, Options{Release: Containerd17})
	if out := c.MustCrictl(t, "version"); !strings.Contains(out, "RuntimeVersion:  v1.7.35") {
		t.Errorf("crictl version:\n%s\nwant containerd v1.7.35", out)
	}
	if out := c.MustCrictl(t, "images"); !strings.Contains(out, "localhost/vmpod/pause") {
		t.Errorf("pause image not listed by crictl images:\n%s", out)
	}
	// A plugin that failed to load or a config it half-understood is a
	// warning or an error in its log, never fatal.
	if log, err := os.ReadFile(c.LogPath); err != nil || strings.Contains(string(log), "level=warning") ||
		strings.Contains(string(log), "level=error") {
		t.Errorf("containerd log (%v) has warnings:\n%s", err, tail(c.LogPath, 40))
	}

	root, netns, cg := c.Root, c.NetNS, c.CgroupParent
	inst := *c.inst
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if pids := inst.procs(false); len(pids) > 0 {
		t.Errorf("processes left: %v", pids)
	}
	for _, p := range []string{root, netns} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s still there: %v", p, err)
		}
	}
	mounts, _ := cgroupMounts()
	for _, mp := range mounts {
		if _, err := os.Stat(filepath.Join(mp, cg)); !os.IsNotExist(err) {
			t.Errorf("cgroup %s still there", filepath.Join(mp, cg))
		}
	}
	if diff := cmpHostDefaults(hostBefore, hostDefaults()); diff != "" {
		t.Errorf("the host's default containerd, CNI and NRI paths changed: %s", diff)
	}
}
