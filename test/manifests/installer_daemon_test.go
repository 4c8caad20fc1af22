package manifests

import (
	"bytes"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/vmpod/vmpod/internal/testenv/repo"
)

// The node daemon's unit: the one copy in the repository and where the
// installer writes it on a host.
const (
	daemonUnitSource = "manifests/systemd/vm-runtime-daemon.service"
	daemonUnitOnHost = "etc/systemd/system/vm-runtime-daemon.service"
)

// daemonExecStart is the unit's command line: `vm-runtime daemon` with the
// socket the shim dials when VMPOD_NODE_SOCKET is unset
// (pkg/shim.DefaultNodeSocket) and the node's paths.
var daemonExecStart = []string{"/opt/vmpod/bin/vm-runtime", "daemon",
	"--socket", "/run/vmpod/vmd.sock",
	"--state-root", "/var/lib/vmpod",
	"--capabilities-cache", "/var/cache/vmpod/qemu-capabilities",
	"--kvm-cache", "/var/lib/vmpod/kvm-probe.json",
	"--disk-cap", "20Gi",
	"--kubelet-root-dir", "/var/lib/kubelet"}

// TestMain makes the test binary the fake host tools of
// TestInstallerStartsDaemon when it runs under their names.
func TestMain(m *testing.M) {
	switch filepath.Base(os.Args[0]) {
	case "nsenter":
		fakeNsenter(os.Args[1:])
	case "systemctl":
		os.Exit(fakeSystemctl(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// unitDirectives reads a unit's directives (continuation lines joined);
// a directive given twice keeps its last value.
func unitDirectives(t *testing.T, unit []byte) map[string]string {
	t.Helper()
	d := map[string]string{}
	for l := range strings.SplitSeq(strings.ReplaceAll(string(unit), "\\\n", " "), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok && !strings.HasPrefix(l, "#") {
			d[k] = v
		}
	}
	return d
}

// checkDaemonUnit: the host has the unit, byte for byte the repository's,
// whose ExecStart runs the daemon on the shim's socket and whose stop
// leaves the VMs.
func checkDaemonUnit(t *testing.T, host string) {
	t.Helper()
	got, err := os.ReadFile(filepath.Join(host, daemonUnitOnHost))
	if err != nil {
		t.Fatalf("the installer wrote no /%s: %v", daemonUnitOnHost, err)
	}
	want, err := os.ReadFile(filepath.Join(repo.Root(t), daemonUnitSource))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("/%s is not %s:\n%s", daemonUnitOnHost, daemonUnitSource, got)
	}
	if fi, err := os.Stat(filepath.Join(host, daemonUnitOnHost)); err == nil && fi.Mode().Perm() != 0o644 {
		t.Errorf("/%s has mode %v, want 0644", daemonUnitOnHost, fi.Mode().Perm())
	}
	d := unitDirectives(t, got)
	if diff := cmp.Diff(daemonExecStart, strings.Fields(d["ExecStart"])); diff != "" {
		t.Errorf("the daemon unit's ExecStart (-want +got):\n%s", diff)
	}
	for k, v := range map[string]string{"KillMode": "process", "Delegate": "yes", "OOMScoreAdjust": "-999", "WantedBy": "multi-user.target"} {
		if d[k] != v {
			t.Errorf("the daemon unit's %s=%q, want %q", k, d[k], v)
		}
	}
	if !slices.Contains(strings.Fields(d["Before"]), "containerd.service") {
		t.Errorf("the daemon unit's Before=%q does not name containerd.service", d["Before"])
	}
}

// TestDaemonUnitReachesTheNodes: the installer's ConfigMap carries the
// script and, beside it, manifests/systemd/vm-runtime-daemon.service
// itself (kustomize reads the file: there is no second copy to drift), and
// the DaemonSet runs the script from where it mounts that ConfigMap, so
// the script finds the unit beside itself.
func TestDaemonUnitReachesTheNodes(t *testing.T) {
	root := repo.Root(t)
	objs := build(t, filepath.Join(root, "manifests"))
	var cm corev1.ConfigMap
	var ds appsv1.DaemonSet
	for _, o := range objs {
		switch {
		case o.GetKind() == "ConfigMap" && strings.HasPrefix(o.GetName(), "vmpod-installer"):
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &cm); err != nil {
				t.Fatal(err)
			}
		case o.GetKind() == "DaemonSet" && o.GetName() == "vmpod-installer":
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &ds); err != nil {
				t.Fatal(err)
			}
		}
	}
	if cm.Name == "" || ds.Name == "" {
		t.Fatalf("no installer ConfigMap (%q) or DaemonSet (%q) in manifests/", cm.Name, ds.Name)
	}
	for key, file := range map[string]string{
		"vmpod-installer.sh":        "manifests/installer/vmpod-installer.sh",
		"vm-runtime-daemon.service": daemonUnitSource,
	} {
		want, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		if cm.Data[key] != string(want) {
			t.Errorf("ConfigMap %s: %s is not %s", cm.Name, key, file)
		}
	}
	spec := ds.Spec.Template.Spec
	c := spec.Containers[0]
	var mount string
	for _, v := range spec.Volumes {
		if v.ConfigMap != nil && v.ConfigMap.Name == cm.Name {
			for _, m := range c.VolumeMounts {
				if m.Name == v.Name {
					mount = m.MountPath
				}
			}
		}
	}
	if mount == "" {
		t.Fatalf("the installer container does not mount ConfigMap %s", cm.Name)
	}
	script := slices.IndexFunc(c.Command, func(a string) bool { return strings.HasSuffix(a, "/vmpod-installer.sh") })
	if script < 0 || filepath.Dir(c.Command[script]) != mount {
		t.Errorf("the installer runs %q, want the script in the ConfigMap's mount %s (the unit is found beside it)", c.Command, mount)
	}
}

// TestInstallerDaemonUnitOwner: a vm-runtime-daemon unit the installer did
// not write is refused when it differs (a change belongs in a drop-in) and
// left in place by uninstall when it is the same; VMPOD_DIR moves
// ExecStart's binary.
func TestInstallerDaemonUnitOwner(t *testing.T) {
	run := func(host, bin, mode string, env ...string) (string, error) {
		cmd := exec.Command("sh", installerScript(t), mode)
		cmd.Env = append(installerEnv(host, bin), env...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	setup := func(unit []byte) (host, bin, unitPath string) {
		host = t.TempDir()
		bin = filepath.Join(host, "image", "vm-runtime")
		writeFile(t, bin, []byte("#!/bin/sh\n"), 0o755)
		unitPath = filepath.Join(host, daemonUnitOnHost)
		if unit != nil {
			writeFile(t, unitPath, unit, 0o644)
		}
		return host, bin, unitPath
	}
	ours, err := os.ReadFile(filepath.Join(repo.Root(t), daemonUnitSource))
	if err != nil {
		t.Fatal(err)
	}

	t.Run("a different unit", func(t *testing.T) {
		mine := []byte("[Service]\nExecStart=/usr/bin/vm-runtime daemon\n")
		host, bin, unitPath := setup(mine)
		out, err := run(host, bin, "install")
		if err == nil || !strings.Contains(out, "/"+daemonUnitOnHost+" exists and is not the installer's") {
			t.Errorf("install over an admin's own unit: err %v\n%s", err, out)
		}
		if got, _ := os.ReadFile(unitPath); !bytes.Equal(got, mine) {
			t.Errorf("install changed the admin's unit:\n%s", got)
		}
	})
	t.Run("the same unit", func(t *testing.T) {
		host, bin, unitPath := setup(ours)
		if out, err := run(host, bin, "install"); err != nil || !strings.Contains(out, "not the installer's: uninstall leaves it") {
			t.Fatalf("install over the same unit put there by hand: err %v\n%s", err, out)
		}
		if out, err := run(host, bin, "uninstall"); err != nil {
			t.Fatalf("uninstall: %v\n%s", err, out)
		}
		if got, _ := os.ReadFile(unitPath); !bytes.Equal(got, ours) {
			t.Errorf("uninstall removed or changed a unit the installer did not write (%q)", got)
		}
	})
	t.Run("VMPOD_DIR", func(t *testing.T) {
		host, bin, unitPath := setup(nil)
		if out, err := run(host, bin, "install", "VMPOD_DIR=/opt/vmpod-test"); err != nil {
			t.Fatalf("install: %v\n%s", err, out)
		}
		got, _ := os.ReadFile(unitPath)
		if argv := strings.Fields(unitDirectives(t, got)["ExecStart"]); len(argv) == 0 || argv[0] != "/opt/vmpod-test/bin/vm-runtime" {
			t.Errorf("VMPOD_DIR=/opt/vmpod-test: ExecStart %q, want /opt/vmpod-test/bin/vm-runtime", argv)
		}
		if out, err := run(host, bin, "uninstall", "VMPOD_DIR=/opt/vmpod-test"); err != nil {
			t.Fatalf("uninstall: %v\n%s", err, out)
		}
		if _, err := os.Stat(unitPath); !os.IsNotExist(err) {
			t.Errorf("uninstall left the unit (err %v)", err)
		}
	})
}

// TestInstallerStartsDaemon runs the installer with RESTART_CONTAINERD=
// systemctl against fake nsenter and systemctl (this test binary under
// those names; its systemctl records each call, and `restart
// vm-runtime-daemon` makes the daemon's socket on the scratch host): the
// daemon is enabled and restarted, and its socket waited for, before
// containerd restarts; a re-run with nothing changed restarts nothing; a
// new vm-runtime restarts the daemon alone; a daemon that makes no socket
// stops the install before containerd's config is touched, naming the unit
// and its journal; uninstall restarts containerd, then stops and disables
// the daemon and removes its unit.
func TestInstallerStartsDaemon(t *testing.T) {
	host, cfgPath, bin, orig := scratchHost(t)
	fake := fakeHostTools(t)
	run := func(mode string) (string, []string, error) {
		t.Helper()
		os.Remove(filepath.Join(fake.dir, "calls"))
		cmd := exec.Command("sh", installerScript(t), mode)
		cmd.Env = append(installerEnv(host, bin), "RESTART_CONTAINERD=systemctl", "PATH="+fake.path,
			"FAKE_SYSTEMD="+fake.dir, "VMPOD_DAEMON_WAIT=2")
		out, err := cmd.CombinedOutput()
		calls, _ := os.ReadFile(filepath.Join(fake.dir, "calls"))
		return string(out), strings.Split(strings.TrimSpace(string(calls)), "\n"), err
	}
	restartDaemon := []string{"daemon-reload", "enable --quiet vm-runtime-daemon", "restart vm-runtime-daemon"}
	sock := filepath.Join(host, "run", "vmpod", "vmd.sock")

	// A daemon that makes no socket: the install stops, containerd's
	// config and containerd untouched.
	fake.set(t, "no-socket", true)
	out, calls, err := run("install")
	if err == nil || !strings.Contains(out, "vm-runtime-daemon (active) made no socket /run/vmpod/vmd.sock in 2s; see journalctl -u vm-runtime-daemon") {
		t.Errorf("install with a daemon that makes no socket: err %v\n%s", err, out)
	}
	if diff := cmp.Diff(restartDaemon, calls[:min(3, len(calls))]); diff != "" || slices.Contains(calls, "restart containerd") {
		t.Errorf("systemctl calls %q, want the daemon restarted and containerd not (-want +got):\n%s", calls, diff)
	}
	if got, _ := os.ReadFile(cfgPath); !bytes.Equal(got, orig) {
		t.Errorf("install changed containerd's config though the daemon never served:\n%s", got)
	}

	// The daemon serves: it is (re)started first (the failed run did not
	// count as started), containerd after.
	fake.set(t, "no-socket", false)
	out, calls, err = run("install")
	if err != nil {
		t.Fatalf("install: %v\n%s", err, out)
	}
	if diff := cmp.Diff(append(slices.Clone(restartDaemon), "restart containerd"), calls); diff != "" {
		t.Errorf("systemctl calls on install (-want +got):\n%s", diff)
	}
	checkDaemonUnit(t, host)
	if fi, err := os.Lstat(sock); err != nil || fi.Mode().Type() != os.ModeSocket {
		t.Errorf("no daemon socket after install: %v", err)
	}

	// Nothing changed: the daemon (and containerd) left alone.
	out, calls, err = run("install")
	if err != nil {
		t.Fatalf("second install: %v\n%s", err, out)
	}
	if diff := cmp.Diff([]string{"is-active --quiet vm-runtime-daemon"}, calls); diff != "" {
		t.Errorf("systemctl calls on a second install (-want +got):\n%s", diff)
	}

	// A new vm-runtime: the daemon restarts, containerd does not.
	writeFile(t, bin, []byte("#!/bin/sh\n# v2\n"), 0o755)
	if out, calls, err = run("install"); err != nil {
		t.Fatalf("install of a new vm-runtime: %v\n%s", err, out)
	}
	if diff := cmp.Diff(restartDaemon, calls); diff != "" {
		t.Errorf("systemctl calls on a new vm-runtime (-want +got):\n%s", diff)
	}

	// A daemon stopped by hand is started again.
	fake.set(t, "active", false)
	if out, calls, err = run("install"); err != nil {
		t.Fatalf("install with the daemon stopped: %v\n%s", err, out)
	}
	if diff := cmp.Diff(append([]string{"is-active --quiet vm-runtime-daemon"}, restartDaemon...), calls); diff != "" {
		t.Errorf("systemctl calls with the daemon stopped (-want +got):\n%s", diff)
	}

	out, calls, err = run("uninstall")
	if err != nil {
		t.Fatalf("uninstall: %v\n%s", err, out)
	}
	if diff := cmp.Diff([]string{"restart containerd", "disable --now --quiet vm-runtime-daemon", "daemon-reload"}, calls); diff != "" {
		t.Errorf("systemctl calls on uninstall (-want +got):\n%s", diff)
	}
	for _, p := range []string{filepath.Join(host, daemonUnitOnHost), filepath.Join(host, "opt", "vmpod")} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("uninstall left %s (err %v)", p, err)
		}
	}
	if got, _ := os.ReadFile(cfgPath); !bytes.Equal(got, orig) {
		t.Errorf("uninstall did not restore containerd's config:\n%s", got)
	}
}

// fakeTools is a PATH whose nsenter and systemctl are this test binary,
// and the dir where the fake systemd keeps its state.
type fakeTools struct{ dir, path string }

func fakeHostTools(t *testing.T) fakeTools {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f := fakeTools{dir: t.TempDir()}
	bin := filepath.Join(f.dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"nsenter", "systemctl"} {
		if err := os.Symlink(self, filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	f.path = bin + ":" + os.Getenv("PATH")
	// The installer must reach these, never the machine's own systemd.
	for _, name := range []string{"nsenter", "systemctl"} {
		cmd := exec.Command("sh", "-c", "command -v "+name)
		cmd.Env = append(os.Environ(), "PATH="+f.path)
		if out, err := cmd.Output(); err != nil || strings.TrimSpace(string(out)) != filepath.Join(bin, name) {
			t.Fatalf("%s on the fake PATH is %q (%v)", name, out, err)
		}
	}
	return f
}

// set turns one of the fake systemd's switches on or off: "active" (the
// daemon runs) and "no-socket" (its restart makes no socket).
func (f fakeTools) set(t *testing.T, name string, on bool) {
	t.Helper()
	p := filepath.Join(f.dir, name)
	if on {
		writeFile(t, p, nil, 0o644)
	} else if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
}

// fakeNsenter runs what follows "--" (the installer's on_host), here.
func fakeNsenter(args []string) {
	i := slices.Index(args, "--")
	if i < 0 || i+1 == len(args) || !slices.Equal(args[:i], []string{"--target", "1", "--mount"}) {
		os.Stderr.WriteString("fake nsenter: want --target 1 --mount -- CMD...\n")
		os.Exit(2)
	}
	path, err := exec.LookPath(args[i+1])
	if err != nil {
		os.Stderr.WriteString("fake nsenter: " + err.Error() + "\n")
		os.Exit(127)
	}
	err = syscall.Exec(path, args[i+1:], os.Environ())
	os.Stderr.WriteString("fake nsenter: " + err.Error() + "\n")
	os.Exit(126)
}

// fakeSystemctl records its arguments in $FAKE_SYSTEMD/calls and keeps the
// daemon's state there.
func fakeSystemctl(args []string) int {
	dir := os.Getenv("FAKE_SYSTEMD")
	if dir == "" {
		os.Stderr.WriteString("fake systemctl: no FAKE_SYSTEMD\n")
		return 2
	}
	f, err := os.OpenFile(filepath.Join(dir, "calls"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 1
	}
	f.WriteString(strings.Join(args, " ") + "\n")
	f.Close()
	has := func(name string) bool { _, err := os.Stat(filepath.Join(dir, name)); return err == nil }
	daemon := slices.Contains(args, "vm-runtime-daemon")
	switch {
	case args[0] == "is-active" && daemon:
		if has("active") {
			if !slices.Contains(args, "--quiet") {
				os.Stdout.WriteString("active\n")
			}
			return 0
		}
		if !slices.Contains(args, "--quiet") {
			os.Stdout.WriteString("inactive\n")
		}
		return 3
	case args[0] == "restart" && daemon:
		os.WriteFile(filepath.Join(dir, "active"), nil, 0o644)
		if has("no-socket") {
			return 0
		}
		sock := filepath.Join(os.Getenv("HOST_ROOT"), "run", "vmpod", "vmd.sock")
		if err := os.MkdirAll(filepath.Dir(sock), 0o700); err != nil {
			return 1
		}
		l, err := net.Listen("unix", sock)
		if err != nil {
			os.Stderr.WriteString("fake systemctl: " + err.Error() + "\n")
			return 1
		}
		l.(*net.UnixListener).SetUnlinkOnClose(false)
		l.Close()
	case args[0] == "disable" && daemon && slices.Contains(args, "--now"):
		os.Remove(filepath.Join(dir, "active"))
	}
	return 0
}
