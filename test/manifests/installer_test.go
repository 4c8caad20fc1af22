package manifests

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"

	"github.com/vmpod/vmpod/internal/testenv/repo"
)

// The runtime tables the installer writes, by containerd config version.
var (
	v2Path = []string{"plugins", "io.containerd.grpc.v1.cri", "containerd", "runtimes", "vmpod"}
	v3Path = []string{"plugins", "io.containerd.cri.v1.runtime", "containerd", "runtimes", "vmpod"}
)

// TestInstallerScript runs manifests/installer/vmpod-installer.sh as the
// installer DaemonSet does, against a scratch host root: the shim is put in
// /opt/vmpod/bin, the node daemon's unit in /etc/systemd/system, the vmpod
// runtime is added to containerd's config in the layout of the file's
// version, a second install changes nothing, and uninstall removes the
// unit and leaves the config byte for byte as it was. Where containerd
// 2.4.2 is built (_output/bin, hack/containerd/install.sh), containerd
// itself reads each result, and containerd 1.7 (_output/containerd-1.7/bin,
// hack/containerd/install-1.7.sh) each version 2 result.
func TestInstallerScript(t *testing.T) {
	root := repo.Root(t)
	script := filepath.Join(root, "manifests", "installer", "vmpod-installer.sh")
	for _, tc := range []struct {
		name, config string // config: testdata file, "" for no config file
		version      string
		path         []string
	}{
		{name: "containerd 1.7 (version 2)", config: "containerd-1.7.toml", version: "1.7.27", path: v2Path},
		{name: "containerd 2.x (version 3)", config: "containerd-2.x.toml", version: "2.1.4", path: v3Path},
		{name: "containerd 2.x without a config file", version: "v2.4.2", path: v3Path},
		{name: "containerd 1.7 without a config file", version: "1.7.27", path: v2Path},
	} {
		t.Run(tc.name, func(t *testing.T) {
			host := t.TempDir()
			cfgPath := filepath.Join(host, "etc", "containerd", "config.toml")
			var orig []byte
			if tc.config != "" {
				var err error
				if orig, err = os.ReadFile(filepath.Join("testdata", tc.config)); err != nil {
					t.Fatal(err)
				}
				writeFile(t, cfgPath, orig, 0o600)
			}
			bin := filepath.Join(host, "image", "vm-runtime")
			writeFile(t, bin, []byte("#!/bin/sh\n"), 0o755)
			jailer := filepath.Join(host, "image", "vmpod-qemu")
			writeFile(t, jailer, []byte("#!/bin/sh\n# the jailer\n"), 0o755)
			// The host's containerd binary lives here; the installer links
			// the shim next to it.
			binDir := filepath.Join(host, "usr", "local", "bin")
			if err := os.MkdirAll(binDir, 0o755); err != nil {
				t.Fatal(err)
			}
			run := func(mode string) string {
				t.Helper()
				cmd := exec.Command("sh", script, mode)
				cmd.Env = append(os.Environ(), "HOST_ROOT="+host, "VMPOD_BIN="+bin, "VMPOD_JAILER_BIN="+jailer, "RESTART_CONTAINERD=none",
					"CHECK_HOST=false", "CONTAINERD_VERSION="+tc.version, "CONTAINERD_BIN_DIR=/usr/local/bin")
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("%s: %v\n%s", mode, err, out)
				}
				return string(out)
			}

			run("install")
			got, err := os.ReadFile(cfgPath)
			if err != nil {
				t.Fatal(err)
			}
			checkRuntimeTable(t, got, tc.path)
			if fi, err := os.Stat(cfgPath); err == nil && tc.config != "" && fi.Mode().Perm() != 0o600 {
				t.Errorf("config mode %v, want the original 0600", fi.Mode().Perm())
			}
			if link, err := os.Readlink(filepath.Join(host, "opt", "vmpod", "bin", "containerd-shim-vmpod-v2")); err != nil || link != "vm-runtime" {
				t.Errorf("shim link: %q, %v", link, err)
			}
			// containerd 2.x finds the shim of a VM's task again after a
			// restart by its name, next to its own binary.
			if link, err := os.Readlink(filepath.Join(binDir, "containerd-shim-vmpod-v2")); err != nil || link != "/opt/vmpod/bin/containerd-shim-vmpod-v2" {
				t.Errorf("the shim's link next to containerd: %q, %v; want -> /opt/vmpod/bin/containerd-shim-vmpod-v2", link, err)
			}
			containerdReads(t, root, cfgPath, slices.Equal(tc.path, v2Path))
			checkDaemonUnit(t, host)
			unitPath := filepath.Join(host, daemonUnitOnHost)
			unitBefore, _ := os.Stat(unitPath)
			binBefore, _ := os.Stat(filepath.Join(host, "opt", "vmpod", "bin", "vm-runtime"))
			// QEMU's jailer next to vm-runtime, which links it from there.
			jailerBefore, _ := os.Stat(filepath.Join(host, "opt", "vmpod", "bin", "vmpod-qemu"))
			if b, err := os.ReadFile(filepath.Join(host, "opt", "vmpod", "bin", "vmpod-qemu")); err != nil || string(b) != "#!/bin/sh\n# the jailer\n" || jailerBefore.Mode().Perm() != 0o755 {
				t.Errorf("/opt/vmpod/bin/vmpod-qemu after install: %q, %v; want the image's, 0755", b, err)
			}

			out := run("install")
			for _, w := range []string{"already has the vmpod runtime", "vm-runtime-daemon.service is up to date"} {
				if !strings.Contains(out, w) {
					t.Errorf("second install does not say %q:\n%s", w, out)
				}
			}
			if again, _ := os.ReadFile(cfgPath); string(again) != string(got) {
				t.Errorf("second install changed the config")
			}
			// Neither the unit nor the binary the daemon runs is written again.
			unitAfter, _ := os.Stat(unitPath)
			binAfter, _ := os.Stat(filepath.Join(host, "opt", "vmpod", "bin", "vm-runtime"))
			if unitBefore == nil || unitAfter == nil || !os.SameFile(unitBefore, unitAfter) || !unitAfter.ModTime().Equal(unitBefore.ModTime()) {
				t.Errorf("second install wrote the daemon's unit again")
			}
			if binBefore == nil || binAfter == nil || !os.SameFile(binBefore, binAfter) {
				t.Errorf("second install copied vm-runtime again")
			}
			if jailerAfter, _ := os.Stat(filepath.Join(host, "opt", "vmpod", "bin", "vmpod-qemu")); jailerBefore == nil || jailerAfter == nil || !os.SameFile(jailerBefore, jailerAfter) {
				t.Errorf("second install copied vmpod-qemu again")
			}
			if !strings.Contains(out, "vm-runtime-daemon not started (RESTART_CONTAINERD=none)") {
				t.Errorf("install with RESTART_CONTAINERD=none does not say the daemon must be started:\n%s", out)
			}

			run("uninstall")
			after, err := os.ReadFile(cfgPath)
			switch {
			case tc.config == "" && !os.IsNotExist(err):
				t.Errorf("uninstall left the config the installer created (err %v)", err)
			case tc.config != "" && string(after) != string(orig):
				t.Errorf("uninstall did not restore the config:\n%s", after)
			}
			if _, err := os.Stat(filepath.Join(host, "opt", "vmpod")); !os.IsNotExist(err) {
				t.Errorf("uninstall left /opt/vmpod (err %v)", err)
			}
			if _, err := os.Lstat(unitPath); !os.IsNotExist(err) {
				t.Errorf("uninstall left /%s (err %v)", daemonUnitOnHost, err)
			}
			if _, err := os.Lstat(filepath.Join(binDir, "containerd-shim-vmpod-v2")); !os.IsNotExist(err) {
				t.Errorf("uninstall left the shim's link next to containerd (err %v)", err)
			}
		})
	}
}

// TestInstallerRefusesForeignRuntime: a vmpod runtime someone added by
// hand is not overwritten (TOML forbids defining the table twice anyway).
func TestInstallerRefusesForeignRuntime(t *testing.T) {
	host := t.TempDir()
	cfg := "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.vmpod]\n  runtime_type = \"io.containerd.vmpod.v2\"\n"
	writeFile(t, filepath.Join(host, "etc", "containerd", "config.toml"), []byte(cfg), 0o644)
	writeFile(t, filepath.Join(host, "vm-runtime"), nil, 0o755)
	cmd := exec.Command("sh", filepath.Join(repo.Root(t), "manifests", "installer", "vmpod-installer.sh"), "install")
	cmd.Env = append(os.Environ(), "HOST_ROOT="+host, "VMPOD_BIN="+filepath.Join(host, "vm-runtime"), "RESTART_CONTAINERD=none", "CHECK_HOST=false")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "already defines a vmpod runtime") {
		t.Errorf("install over a hand-made vmpod runtime: err %v\n%s", err, out)
	}
}

// checkRuntimeTable parses the config as TOML and checks the vmpod runtime
// at path.
func checkRuntimeTable(t *testing.T, config []byte, path []string) {
	t.Helper()
	var m map[string]any
	if _, err := toml.Decode(string(config), &m); err != nil {
		t.Fatalf("the config is not TOML any more: %v\n%s", err, config)
	}
	rt := lookup(m, path...)
	if rt == nil {
		t.Fatalf("no [%s] in\n%s", strings.Join(path, "."), config)
	}
	if rt["runtime_type"] != "io.containerd.vmpod.v2" || rt["runtime_path"] != "/opt/vmpod/bin/containerd-shim-vmpod-v2" {
		t.Errorf("runtime %v", rt)
	}
	if a, _ := rt["pod_annotations"].([]any); !slices.Equal(a, []any{"vmpod.io/*"}) {
		t.Errorf("pod_annotations %v, want [vmpod.io/*]", rt["pod_annotations"])
	}
}

func lookup(m map[string]any, path ...string) map[string]any {
	for _, k := range path {
		next, ok := m[k].(map[string]any)
		if !ok {
			return nil
		}
		m = next
	}
	return m
}

// containerdReads has containerd 2.4.2 load the config (it migrates a
// version 2 file) and checks that the vmpod runtime is in what it read;
// and, for a version 2 file, containerd 1.7 too.
func containerdReads(t *testing.T, root, cfgPath string, version2 bool) {
	t.Helper()
	type reader struct {
		bin, script string
		path        []string // where the runtime is in its config dump
	}
	readers := []reader{{filepath.Join(root, "_output", "bin", "containerd"), "install.sh", v3Path}}
	if version2 {
		readers = append(readers, reader{filepath.Join(root, "_output", "containerd-1.7", "bin", "containerd"), "install-1.7.sh", v2Path})
	}
	for _, r := range readers {
		if _, err := os.Stat(r.bin); err != nil {
			t.Logf("%s not built (hack/containerd/%s): not asking it", r.bin, r.script)
			continue
		}
		out, err := exec.Command(r.bin, "--config", cfgPath, "config", "dump").Output() // warnings go to stderr
		if err != nil {
			t.Fatalf("%s config dump: %v\n%s", r.bin, err, stderr(err))
		}
		checkRuntimeTable(t, out, r.path)
	}
}

func writeFile(t *testing.T, path string, data []byte, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, mode); err != nil {
		t.Fatal(err)
	}
}

func stderr(err error) []byte {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.Stderr
	}
	return nil
}
