package manifests

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"

	"github.com/vmpod/vmpod/internal/testenv/repo"
)

// The installer's marker lines, as vmpod-installer.sh writes them.
const (
	markerBegin = "# BEGIN vmpod runtime (added by the vmpod installer; removed on uninstall)"
	markerEnd   = "# END vmpod runtime"
)

// TestInstallerRefusesBrokenMarkers: a containerd config whose marker
// lines are not one whole block is left byte for byte as it is, by install
// and by uninstall, with an error naming the file and what is wrong. (The
// block's sed range deletes from a BEGIN to the end of the file when no END
// follows.)
func TestInstallerRefusesBrokenMarkers(t *testing.T) {
	const head = "version = 2\n\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = \"registry.k8s.io/pause:3.10\"\n"
	const tail = "\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n  runtime_type = \"io.containerd.runc.v2\"\n"
	const block = markerBegin + "\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.vmpod]\n  runtime_type = \"io.containerd.vmpod.v2\"\n" + markerEnd + "\n"
	for _, tc := range []struct {
		name, config, want string
	}{
		{"BEGIN without END", head + markerBegin + "\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.vmpod]\n" + tail,
			"it has the BEGIN vmpod marker line without its END line"},
		{"END without BEGIN", head + markerEnd + "\n" + tail,
			"it has the END vmpod marker line without its BEGIN line"},
		{"two blocks", head + block + tail + block,
			"it has 2 BEGIN and 2 END vmpod marker lines, want one block at most"},
		{"END before BEGIN", head + markerEnd + "\n" + tail + markerBegin + "\n",
			"its END vmpod marker line (line 5) comes before its BEGIN line (line 9)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			host := t.TempDir()
			cfgPath := filepath.Join(host, "etc", "containerd", "config.toml")
			writeFile(t, cfgPath, []byte(tc.config), 0o644)
			bin := filepath.Join(host, "image", "vm-runtime")
			writeFile(t, bin, []byte("#!/bin/sh\n"), 0o755)
			for _, mode := range []string{"install", "uninstall"} {
				cmd := exec.Command("sh", installerScript(t), mode)
				cmd.Env = installerEnv(host, bin)
				out, err := cmd.CombinedOutput()
				if err == nil {
					t.Errorf("%s: no error; output:\n%s", mode, out)
				}
				for _, w := range []string{"/etc/containerd/config.toml: " + tc.want, "not editing it"} {
					if !strings.Contains(string(out), w) {
						t.Errorf("%s: output does not say %q:\n%s", mode, w, out)
					}
				}
				if got, _ := os.ReadFile(cfgPath); string(got) != tc.config {
					t.Errorf("%s changed the config:\n%s", mode, got)
				}
			}
		})
	}
}

// TestInstallerRunStops runs the installer's `run` with the DaemonSet's
// own environment (manifests/installer/installer.yaml): the pod stopping,
// as it does for a rollout, leaves the runtime on the node; a pod of the
// DaemonSet set to VMPOD_RUN_MODE=uninstall takes it off; and with
// VMPOD_UNINSTALL_ON_STOP=true stopping uninstalls.
func TestInstallerRunStops(t *testing.T) {
	host, cfgPath, bin, orig := scratchHost(t)
	shim := filepath.Join(host, "opt", "vmpod", "bin", "containerd-shim-vmpod-v2")
	env := daemonSetEnv(t)
	installed := func() bool {
		cfg, _ := os.ReadFile(cfgPath)
		_, err := os.Lstat(shim)
		return err == nil && bytes.Contains(cfg, []byte(markerBegin))
	}

	// A rollout: the pod installs, is stopped, and vmpod stays.
	p := startRun(t, host, bin, env)
	p.waitFor(t, "installed; waiting")
	p.stop(t)
	if !installed() {
		t.Fatalf("the pod's stop uninstalled (or it never installed):\n%s", p.output())
	}
	if !strings.Contains(p.output(), "vmpod stays installed") {
		t.Errorf("stop did not say that vmpod stays:\n%s", p.output())
	}

	// The documented uninstall: the DaemonSet's pods with
	// VMPOD_RUN_MODE=uninstall take vmpod off, then wait to be deleted.
	p = startRun(t, host, bin, append(env, "VMPOD_RUN_MODE=uninstall"))
	p.waitFor(t, "vmpod is off this node")
	if got, _ := os.ReadFile(cfgPath); string(got) != string(orig) {
		t.Errorf("VMPOD_RUN_MODE=uninstall did not restore the config:\n%s", got)
	}
	if _, err := os.Stat(filepath.Join(host, "opt", "vmpod")); !os.IsNotExist(err) {
		t.Errorf("VMPOD_RUN_MODE=uninstall left /opt/vmpod (err %v)", err)
	}
	p.stop(t)

	// Opted in: stopping uninstalls.
	p = startRun(t, host, bin, append(env, "VMPOD_UNINSTALL_ON_STOP=true"))
	p.waitFor(t, "installed; waiting")
	if !installed() {
		t.Fatalf("not installed:\n%s", p.output())
	}
	p.stop(t)
	if got, _ := os.ReadFile(cfgPath); string(got) != string(orig) {
		t.Errorf("stop with VMPOD_UNINSTALL_ON_STOP=true did not restore the config:\n%s", got)
	}
}

func installerScript(t *testing.T) string {
	return filepath.Join(repo.Root(t), "manifests", "installer", "vmpod-installer.sh")
}

// installerEnv runs the installer against a scratch host: no host checks,
// no containerd restart.
func installerEnv(host, bin string) []string {
	return append(os.Environ(), "HOST_ROOT="+host, "VMPOD_BIN="+bin, "RESTART_CONTAINERD=none",
		"CHECK_HOST=false", "CONTAINERD_VERSION=2.1.4", "CONTAINERD_BIN_DIR=/")
}

// daemonSetEnv is the installer container's environment from
// installer.yaml, less what would reach the real host.
func daemonSetEnv(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repo.Root(t), "manifests", "installer", "installer.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	if err := yaml.Unmarshal(b, &ds); err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, e := range ds.Spec.Template.Spec.Containers[0].Env {
		switch e.Name {
		case "HOST_ROOT", "RESTART_CONTAINERD":
		default:
			env = append(env, e.Name+"="+e.Value)
		}
	}
	return env
}

// runningInstaller is `vmpod-installer.sh run` in a process group of its
// own (its `sleep` children outlive it otherwise).
type runningInstaller struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
	done chan error
}

func (p *runningInstaller) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

func (p *runningInstaller) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

func startRun(t *testing.T, host, bin string, env []string) *runningInstaller {
	t.Helper()
	p := &runningInstaller{done: make(chan error, 1)}
	p.cmd = exec.Command("sh", installerScript(t), "run")
	p.cmd.Env = append(installerEnv(host, bin), env...)
	p.cmd.Stdout, p.cmd.Stderr = p, p
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := p.cmd.Process.Pid
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) })
	return p
}

func (p *runningInstaller) waitFor(t *testing.T, what string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(p.output(), what) {
		select {
		case err := <-p.done:
			t.Fatalf("the installer exited (%v) before saying %q:\n%s", err, what, p.output())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the installer did not say %q in 30s:\n%s", what, p.output())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop sends SIGTERM, as the kubelet does, and waits for a clean exit.
func (p *runningInstaller) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.done:
		if err != nil {
			t.Fatalf("the installer exited with %v:\n%s", err, p.output())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the installer did not exit in 30s after SIGTERM:\n%s", p.output())
	}
}

// scratchHost is a host root for the installer: containerd 2.x's config
// (returned as it was) and a vm-runtime to install.
func scratchHost(t *testing.T) (host, cfgPath, bin string, orig []byte) {
	t.Helper()
	orig, err := os.ReadFile(filepath.Join("testdata", "containerd-2.x.toml"))
	if err != nil {
		t.Fatal(err)
	}
	host = t.TempDir()
	cfgPath = filepath.Join(host, "etc", "containerd", "config.toml")
	writeFile(t, cfgPath, orig, 0o644)
	bin = filepath.Join(host, "image", "vm-runtime")
	writeFile(t, bin, []byte("#!/bin/sh\n"), 0o755)
	return host, cfgPath, bin, orig
}
