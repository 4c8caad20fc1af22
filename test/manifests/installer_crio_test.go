package manifests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/google/go-cmp/cmp"

	"github.com/vmpod/vmpod/internal/testenv/repo"
)

// TestInstallerCRIO runs the installer for CRI-O (CONTAINER_RUNTIME=crio):
// the runtime is a drop-in of its own with runtime_type "vm" (CRI-O then
// starts the shim as containerd 1.7 does and speaks task API v2), a second
// install changes nothing, a vmpod runtime defined elsewhere is refused,
// and uninstall removes the drop-in and the shim.
func TestInstallerCRIO(t *testing.T) {
	script := filepath.Join(repo.Root(t), "manifests", "installer", "vmpod-installer.sh")
	host := t.TempDir()
	bin := filepath.Join(host, "image", "vm-runtime")
	writeFile(t, bin, []byte("#!/bin/sh\n"), 0o755)
	dropin := filepath.Join(host, "etc", "crio", "crio.conf.d", "50-vmpod.conf")
	run := func(mode string) (string, error) {
		t.Helper()
		cmd := exec.Command("sh", script, mode)
		cmd.Env = append(os.Environ(), "HOST_ROOT="+host, "VMPOD_BIN="+bin, "RESTART_CONTAINERD=none",
			"CHECK_HOST=false", "CONTAINER_RUNTIME=crio")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	if out, err := run("install"); err != nil {
		t.Fatalf("install: %v\n%s", err, out)
	}
	b, err := os.ReadFile(dropin)
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Crio struct {
			Runtime struct {
				Runtimes map[string]map[string]any `toml:"runtimes"`
			} `toml:"runtime"`
		} `toml:"crio"`
	}
	if _, err := toml.Decode(string(b), &cfg); err != nil {
		t.Fatalf("drop-in is not TOML: %v\n%s", err, b)
	}
	want := map[string]map[string]any{"vmpod": {
		"runtime_path": "/opt/vmpod/bin/containerd-shim-vmpod-v2",
		"runtime_type": "vm",
		"runtime_root": "/run/vmpod/crio",
	}}
	if diff := cmp.Diff(want, cfg.Crio.Runtime.Runtimes); diff != "" {
		t.Errorf("CRI-O runtimes (-want +got):\n%s", diff)
	}
	if out, err := run("install"); err != nil || !strings.Contains(out, "already has the vmpod runtime") {
		t.Errorf("second install: %v\n%s", err, out)
	}

	other := filepath.Join(host, "etc", "crio", "crio.conf.d", "10-mine.conf")
	writeFile(t, other, []byte("[crio.runtime.runtimes.vmpod]\nruntime_type = \"vm\"\n"), 0o644)
	os.Remove(dropin)
	if out, err := run("install"); err == nil || !strings.Contains(out, "/etc/crio/crio.conf.d/10-mine.conf already defines a vmpod runtime") {
		t.Errorf("install next to a hand-made vmpod runtime: err %v\n%s", err, out)
	}
	os.Remove(other)

	if out, err := run("install"); err != nil {
		t.Fatalf("install: %v\n%s", err, out)
	}
	if out, err := run("uninstall"); err != nil {
		t.Fatalf("uninstall: %v\n%s", err, out)
	}
	for _, p := range []string{dropin, filepath.Join(host, "opt", "vmpod")} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("uninstall left %s (err %v)", p, err)
		}
	}
}
