//go:build nodevm

package nodevm

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmpod/vmpod/internal/testenv/nodevm"
	"github.com/vmpod/vmpod/internal/testenv/repo"
	"github.com/vmpod/vmpod/internal/testguest"
)

// insideEnv tells this test binary that it runs inside the node VM.
const insideEnv = "VMPOD_IN_NODEVM"

// factsFile is where the inside run writes what it measured, one line each,
// for the host side to log.
const factsFile = "facts.txt"

// TestCgroupV2SystemdNode boots a cgroup v2 + systemd node and runs the
// checks of this package's doc inside it (see inside.go).
func TestCgroupV2SystemdNode(t *testing.T) {
	if os.Getenv(insideEnv) != "" {
		inside(t)
		return
	}
	start := time.Now()
	repo := repo.Root(t)
	bin := t.TempDir()
	build(t, repo, filepath.Join(bin, "vm-runtime"), "build", "./cmd/vm-runtime")
	build(t, repo, filepath.Join(bin, "vmpod-qemu"), "build", "./cmd/vmpod-qemu")
	build(t, repo, filepath.Join(bin, "podcgroup.test"), "test", "-c", "-tags", "systemdnode", "./pkg/podcgroup")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// containerd 2.4.2, ctr, crictl and the pause image, built on the host
	// (the node sees the host's root read-only, the repo included).
	script(t, filepath.Join(repo, "hack", "containerd", "install.sh"))
	pause := script(t, filepath.Join(repo, "hack", "pause", "build.sh"))
	// kind's own node config, from the kind module go.mod pins (downloaded
	// if this machine has not built anything of kind yet).
	var kindMod struct{ Dir string }
	if err := json.Unmarshal([]byte(run(t, repo, "go", "mod", "download", "-json", "sigs.k8s.io/kind")), &kindMod); err != nil || kindMod.Dir == "" {
		t.Fatalf("the kind module: %v", err)
	}
	kindDir := kindMod.Dir

	files := map[string]string{
		"nodevm.test":      self,
		"vm-runtime":       filepath.Join(bin, "vm-runtime"),
		"vmpod-qemu":       filepath.Join(bin, "vmpod-qemu"),
		"podcgroup.test":   filepath.Join(bin, "podcgroup.test"),
		"kind-config.toml": filepath.Join(kindDir, "images", "base", "files", "etc", "containerd", "config.toml"),
	}
	env := map[string]string{
		insideEnv:             "1",
		"VMPOD_REPO":          repo,
		"VMPOD_PAUSE_ARCHIVE": strings.TrimSpace(pause),
		"VMPOD_GUEST_DIR":     testguest.Dir(t),
	}
	var sh strings.Builder
	for k, v := range env {
		fmt.Fprintf(&sh, "export %s=%q\n", k, v)
	}
	// The harness finds the repo from the working directory.
	fmt.Fprintf(&sh, "cd %q\nexec %s/nodevm.test -test.run '^TestCgroupV2SystemdNode$' -test.v -test.timeout 9m\n",
		filepath.Join(repo, "test", "nodevm"), nodevm.ShareDir)
	// The repo (and the test guest in it) must be visible in the node even
	// when it lives under /tmp, as a CI clone may.
	res := nodevm.Run(t, nodevm.Options{Script: sh.String(), Files: files, Timeout: 10 * time.Minute,
		Expose: []string{repo, testguest.Dir(t)}})
	for _, line := range strings.Split(strings.TrimSpace(string(res.Files[factsFile])), "\n") {
		if line != "" {
			t.Logf("node: %s", line)
		}
	}
	if res.ExitCode != 0 || !strings.Contains(res.Output, "--- PASS: TestCgroupV2SystemdNode") {
		t.Fatalf("inside the node VM (exit %d):\n%s", res.ExitCode, res.Output)
	}
	t.Logf("inside the node VM:\n%s", lastLines(res.Output, 40))
	t.Logf("boot to run.sh %.1fs; whole test %.1fs", res.Boot.Seconds(), time.Since(start).Seconds())
}

// build runs go build or go test -c in the repo.
func build(t *testing.T, repo, out string, args ...string) {
	t.Helper()
	args = append(args[:1], append([]string{"-o", out}, args[1:]...)...)
	run(t, repo, "go", args...)
}

// script runs a hack/ script, showing its progress, and returns its stdout.
func script(t *testing.T, path string) string {
	t.Helper()
	cmd := exec.Command(path)
	var out strings.Builder
	cmd.Stdout = &out
	cmd.Stderr = testWriter{t}
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return out.String()
}

func run(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, stderr)
	}
	return string(out)
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// TestCgroupV1SystemdNode: pkg/podcgroup's drivers on the fourth kind of
// node, cgroup v1 with systemd as PID 1 (rare now, but still the kubelet's
// systemd driver on older distros).
func TestCgroupV1SystemdNode(t *testing.T) {
	repo := repo.Root(t)
	bin := t.TempDir()
	build(t, repo, filepath.Join(bin, "podcgroup.test"), "test", "-c", "-tags", "systemdnode", "./pkg/podcgroup")
	res := nodevm.Run(t, nodevm.Options{
		Script:   "[ \"$(stat -fc %T /sys/fs/cgroup)\" = tmpfs ] && [ -d /sys/fs/cgroup/memory/system.slice ] || { echo not cgroup v1 with systemd; grep cgroup /proc/mounts; exit 1; }\n./podcgroup.test -test.run Driver -test.v -test.timeout 2m\n",
		Files:    map[string]string{"podcgroup.test": filepath.Join(bin, "podcgroup.test")},
		Timeout:  4 * time.Minute,
		CgroupV1: true,
	})
	for _, want := range []string{"--- PASS: TestCgroupfsDriver", "--- PASS: TestSystemdDriver"} {
		if res.ExitCode != 0 || !strings.Contains(res.Output, want) {
			t.Fatalf("pkg/podcgroup on a cgroup v1 + systemd node (exit %d), no %q:\n%s", res.ExitCode, want, res.Output)
		}
	}
	t.Logf("pkg/podcgroup on cgroup v1 + systemd: passed; boot to run.sh %.1fs, QEMU %.1fs", res.Boot.Seconds(), res.Total.Seconds())
}
