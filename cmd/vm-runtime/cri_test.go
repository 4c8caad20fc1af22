package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/vmpod/vmpod/internal/testenv/repo"
)

// TestCRIUnitFlags keeps manifests/systemd/vm-runtime-cri.service in step
// with cri's flags: its command line parses, and it says what the
// defaults are, as its header claims.
func TestCRIUnitFlags(t *testing.T) {
	argv := unitArgs(t, "vm-runtime-cri.service", "cri")
	got, gotListen, _, code := criFlags(argv)
	if code != 0 {
		t.Fatalf("the unit's flags %q do not parse (exit %d)", argv, code)
	}
	want, wantListen, _, _ := criFlags(nil)
	if gotListen != wantListen {
		t.Errorf("the unit listens on %s, the default is %s", gotListen, wantListen)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the unit's flags are not the defaults (-want +got):\n%s", diff)
	}
}

// TestCRIFlagsCgroupDriver: --cgroup-driver takes cgroupfs or systemd;
// anything else is a bad command line (exit 2).
func TestCRIFlagsCgroupDriver(t *testing.T) {
	for _, d := range []string{"cgroupfs", "systemd"} {
		if cfg, _, _, code := criFlags([]string{"--cgroup-driver", d}); code != 0 || cfg.CgroupDriver != d {
			t.Errorf("--cgroup-driver %s: driver %q, exit %d", d, cfg.CgroupDriver, code)
		}
	}
	if _, _, _, code := criFlags([]string{"--cgroup-driver", "sytemd"}); code != 2 {
		t.Errorf("--cgroup-driver sytemd: exit %d, want 2", code)
	}
}

// unitArgs are the flags the systemd unit (manifests/systemd/unit) gives
// `vm-runtime sub`.
func unitArgs(t *testing.T, unit, sub string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repo.Root(t), "manifests", "systemd", unit))
	if err != nil {
		t.Fatal(err)
	}
	var line string
	for l := range strings.SplitSeq(strings.ReplaceAll(string(b), "\\\n", " "), "\n") {
		if rest, ok := strings.CutPrefix(l, "ExecStart="); ok {
			line = rest
		}
	}
	argv := strings.Fields(line)
	if len(argv) < 2 || filepath.Base(argv[0]) != "vm-runtime" || argv[1] != sub {
		t.Fatalf("%s: ExecStart=%s: want vm-runtime %s ...", unit, line, sub)
	}
	return argv[2:]
}

// TestCRIFlagsSessions: --max-sessions-per-pod and --max-sessions-per-node
// reach the server's config; zero or less is a bad command line.
func TestCRIFlagsSessions(t *testing.T) {
	cfg, _, _, code := criFlags([]string{"--max-sessions-per-pod", "3", "--max-sessions-per-node", "7"})
	if code != 0 || cfg.MaxSessionsPerPod != 3 || cfg.MaxSessionsPerNode != 7 {
		t.Errorf("per pod %d, per node %d, exit %d; want 3, 7, 0", cfg.MaxSessionsPerPod, cfg.MaxSessionsPerNode, code)
	}
	for _, bad := range [][]string{{"--max-sessions-per-pod", "0"}, {"--max-sessions-per-node", "-1"}} {
		if _, _, _, code := criFlags(bad); code != 2 {
			t.Errorf("%v: exit %d, want 2", bad, code)
		}
	}
}

// TestCRIFlagsRegistryMirror: --registry-mirror HOST=URL, repeated, maps
// each registry to its mirror; a bad one, or a second mirror for a
// registry, is a bad command line.
func TestCRIFlagsRegistryMirror(t *testing.T) {
	cfg, _, _, code := criFlags([]string{"--registry-mirror", "registry.k8s.io=http://127.0.0.1:5000",
		"--registry-mirror", "docker.io=https://mirror.example:8443/"})
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	got := map[string]string{}
	for h, u := range cfg.RegistryMirrors {
		got[h] = u.String()
	}
	want := map[string]string{"registry.k8s.io": "http://127.0.0.1:5000", "docker.io": "https://mirror.example:8443"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("mirrors (-want +got):\n%s", diff)
	}
	for _, bad := range []string{"registry.k8s.io", "=http://x", "registry.k8s.io=ftp://x", "registry.k8s.io=http://x/path",
		"registry.k8s.io=http://user:pw@x", "a/b=http://x"} {
		if _, _, _, code := criFlags([]string{"--registry-mirror", bad}); code != 2 {
			t.Errorf("--registry-mirror %q: exit %d, want 2", bad, code)
		}
	}
	if _, _, _, code := criFlags([]string{"--registry-mirror", "gcr.io=http://a", "--registry-mirror", "gcr.io=http://b"}); code != 2 {
		t.Errorf("two mirrors for gcr.io: exit %d, want 2", code)
	}
}
