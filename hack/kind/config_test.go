// Package kind checks the kind cluster config and the workflow that uses it
// without Docker: the config is decoded with kind's own v1alpha4 API types
// (strictly, as kind does); the vmpod installer (manifests/installer) is
// run on the containerd config of the node image of the kind release in
// go.mod, which kind ships in its module, and containerd 2.4.2 itself
// loads the result when it is built. The kind defaults vmpod relies on
// (the systemd cgroup driver) are read from that release too.
package kind

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
	"sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
	"sigs.k8s.io/yaml"
)

// runtimes is where the CRI runtimes table is in a containerd config of
// each version; containerd 2.x migrates 2 to the names of 3 on load, and 4
// (containerd 2.4's) keeps them.
var runtimes = map[int][]string{
	2: {"plugins", "io.containerd.grpc.v1.cri", "containerd", "runtimes"},
	3: {"plugins", "io.containerd.cri.v1.runtime", "containerd", "runtimes"},
	4: {"plugins", "io.containerd.cri.v1.runtime", "containerd", "runtimes"},
}

func loadCluster(t *testing.T) v1alpha4.Cluster {
	t.Helper()
	b, err := os.ReadFile("cluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var c v1alpha4.Cluster
	if err := yaml.UnmarshalStrict(b, &c); err != nil {
		t.Fatalf("cluster.yaml is not a kind v1alpha4 Cluster: %v", err)
	}
	if c.Kind != "Cluster" || c.APIVersion != "kind.x-k8s.io/v1alpha4" {
		t.Fatalf("kind %q apiVersion %q", c.Kind, c.APIVersion)
	}
	v1alpha4.SetDefaultsCluster(&c)
	return c
}

// TestClusterConfig: a control plane and a worker, kind's containerd
// config untouched (the installer adds the vmpod runtime, as on any
// cluster: docs/install.md), nothing of the host mounted, the kubelet gate
// that counts overhead twice off and cgroup v1 hosts allowed.
func TestClusterConfig(t *testing.T) {
	c := loadCluster(t)
	var roles []string
	for i, n := range c.Nodes {
		roles = append(roles, string(n.Role))
		if len(n.ExtraMounts) != 0 {
			t.Errorf("node %d (%s) mounts %v: the installer puts vmpod into the node", i, n.Role, n.ExtraMounts)
		}
	}
	if !slices.Equal(roles, []string{"control-plane", "worker"}) {
		t.Errorf("nodes %v, want a control-plane and a worker", roles)
	}
	for i, p := range c.ContainerdConfigPatches {
		if strings.Contains(p, "vmpod") {
			t.Errorf("containerd patch %d names vmpod: the installer adds the runtime, and uninstall must leave kind's config as kind wrote it", i)
		}
	}
	if on, ok := c.FeatureGates["InPlacePodLevelResourcesVerticalScaling"]; !ok || on {
		t.Errorf("featureGates InPlacePodLevelResourcesVerticalScaling = %v (set: %v), want false (docs/install.md)", on, ok)
	}
	if !slices.ContainsFunc(c.KubeadmConfigPatches, func(p string) bool { return strings.Contains(p, "failCgroupV1: false") }) {
		t.Errorf("no kubeadm patch with failCgroupV1: false: a cgroup v1 host's kubelets would not start")
	}
}

// checkRuntime returns the vmpod runtime table under runtimes after
// checking what containerd needs to run vmpod pods.
func checkRuntime(t *testing.T, m map[string]any, runtimes []string) map[string]any {
	t.Helper()
	rt := lookup(m, append(slices.Clone(runtimes), "vmpod")...)
	if rt == nil {
		t.Fatalf("no [%s.vmpod]", strings.Join(runtimes, "."))
	}
	if rt["runtime_type"] != "io.containerd.vmpod.v2" {
		t.Errorf("runtime_type %v", rt["runtime_type"])
	}
	if p, _ := rt["runtime_path"].(string); !strings.HasSuffix(p, "/containerd-shim-vmpod-v2") {
		t.Errorf("runtime_path %q: want the containerd-shim-vmpod-v2 link", p)
	}
	if a, _ := rt["pod_annotations"].([]any); !slices.Equal(a, []any{"vmpod.io/*"}) {
		t.Errorf("pod_annotations %v, want [vmpod.io/*]", rt["pod_annotations"])
	}
	return rt
}

// checkKindRunc: kind's runc runtime is still there, with the systemd
// cgroup driver kind sets.
func checkKindRunc(t *testing.T, m map[string]any, runtimes []string) {
	t.Helper()
	opts := lookup(m, append(slices.Clone(runtimes), "runc", "options")...)
	if opts == nil {
		t.Fatalf("no [%s.runc.options]: the patch lost kind's runc", strings.Join(runtimes, "."))
	}
	if opts["SystemdCgroup"] != true {
		t.Errorf("runc SystemdCgroup = %v, want kind's true", opts["SystemdCgroup"])
	}
}

func lookup(m map[string]any, keys ...string) map[string]any {
	for _, k := range keys {
		next, ok := m[k].(map[string]any)
		if !ok {
			return nil
		}
		m = next
	}
	return m
}

func configVersion(m map[string]any) int {
	v, _ := m["version"].(int64)
	return int(v)
}

// kindModuleFile is a file of the kind release in go.mod.
func kindModuleFile(t *testing.T, elem ...string) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/kind").Output()
	if err != nil {
		t.Fatalf("go list sigs.k8s.io/kind: %v", err)
	}
	return filepath.Join(append([]string{strings.TrimSpace(string(out))}, elem...)...)
}

// kindNodeConfig is the containerd config of kind's node image.
func kindNodeConfig(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(kindModuleFile(t, "images", "base", "files", "etc", "containerd", "config.toml"))
	if err != nil {
		t.Fatalf("kind's node containerd config: %v", err)
	}
	return string(b)
}

// TestKindDefaults: what vmpod's kind setup assumes of kind, read from the
// kind release in go.mod: the node's containerd config is version 2 with
// runc on the systemd cgroup driver, and the kubelet kind configures uses
// the systemd driver (for Kubernetes >= 1.24) under cgroupRoot /kubelet.
// With cgroup v2 on the host, pods' cgroupsPath reach the shim as systemd
// slice:prefix:name triples under kubelet.slice.
func TestKindDefaults(t *testing.T) {
	var node map[string]any
	if _, err := toml.Decode(kindNodeConfig(t), &node); err != nil {
		t.Fatal(err)
	}
	if v := configVersion(node); v != 2 {
		t.Errorf("kind's node containerd config is version %d; cluster.yaml's comment says 2", v)
	}
	checkKindRunc(t, node, runtimes[configVersion(node)])

	b, err := os.ReadFile(kindModuleFile(t, "pkg", "cluster", "internal", "kubeadm", "config.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`c.CgroupDriver = "systemd"`, "cgroupDriver: {{ .CgroupDriver }}\ncgroupRoot: /kubelet\n"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("kind's kubeadm config template no longer has %q", want)
		}
	}
}

// TestInstallerOnKindNodeConfig runs the installer as its DaemonSet does
// (manifests/installer/vmpod-installer.sh against a scratch host root) on
// kind's node containerd config: the vmpod runtime is added next to kind's
// runc, containerd 2.4.2 (when built) loads the result, the node daemon's
// unit is written (kind's nodes run systemd; with RESTART_CONTAINERD=none
// nothing starts it here), a second install changes neither, and uninstall
// gives kind's config back byte for byte and removes the unit.
func TestInstallerOnKindNodeConfig(t *testing.T) {
	kindConfig := kindNodeConfig(t)
	host := t.TempDir()
	cfgPath := filepath.Join(host, "etc", "containerd", "config.toml")
	if err := os.MkdirAll(filepath.Dir(cfgPath), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfgPath, []byte(kindConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(host, "image", "vm-runtime")
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(mode string) {
		t.Helper()
		cmd := exec.Command("sh", filepath.Join("..", "..", "manifests", "installer", "vmpod-installer.sh"), mode)
		// kind's node image runs containerd 2.x.
		cmd.Env = append(os.Environ(), "HOST_ROOT="+host, "VMPOD_BIN="+bin, "RESTART_CONTAINERD=none",
			"CHECK_HOST=false", "CONTAINERD_VERSION=2.4.2", "CONTAINERD_BIN_DIR=/")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("installer %s: %v\n%s", mode, err, out)
		}
	}
	unitPath := filepath.Join(host, "etc", "systemd", "system", "vm-runtime-daemon.service")
	wantUnit, err := os.ReadFile(filepath.Join("..", "..", "manifests", "systemd", "vm-runtime-daemon.service"))
	if err != nil {
		t.Fatal(err)
	}
	run("install")
	b, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	if unit, err := os.ReadFile(unitPath); err != nil || string(unit) != string(wantUnit) {
		t.Errorf("the daemon's unit on the node is not manifests/systemd/vm-runtime-daemon.service (%v):\n%s", err, unit)
	} else if argv := execStart(string(unit)); len(argv) < 4 || strings.Join(argv[:4], " ") != "/opt/vmpod/bin/vm-runtime daemon --socket /run/vmpod/vmd.sock" {
		t.Errorf("the daemon's unit runs %q, want /opt/vmpod/bin/vm-runtime daemon --socket /run/vmpod/vmd.sock ...", argv)
	}
	run("install")
	if again, _ := os.ReadFile(cfgPath); string(again) != string(b) {
		t.Errorf("a second install changed kind's config:\n%s", again)
	}
	if unit, _ := os.ReadFile(unitPath); string(unit) != string(wantUnit) {
		t.Errorf("a second install changed the daemon's unit:\n%s", unit)
	}
	var node map[string]any
	if _, err := toml.Decode(string(b), &node); err != nil {
		t.Fatalf("the installed config is not TOML: %v\n%s", err, b)
	}
	v := configVersion(node)
	checkRuntime(t, node, runtimes[v])
	checkKindRunc(t, node, runtimes[v])
	containerd := filepath.Join("..", "..", "_output", "bin", "containerd")
	if _, err := os.Stat(containerd); err == nil {
		loaded := containerdDump(t, containerd, node)
		checkRuntime(t, loaded, runtimes[4])
		checkKindRunc(t, loaded, runtimes[4])
	} else {
		t.Logf("containerd not built (hack/containerd/install.sh): not asking containerd itself")
	}
	run("uninstall")
	if after, err := os.ReadFile(cfgPath); err != nil || string(after) != kindConfig {
		t.Errorf("after uninstall kind's config is not as kind wrote it (%v):\n%s", err, after)
	}
	if _, err := os.Lstat(unitPath); !os.IsNotExist(err) {
		t.Errorf("uninstall left the daemon's unit (err %v)", err)
	}
}

// execStart is a unit's ExecStart command line (continuation lines joined).
func execStart(unit string) []string {
	for l := range strings.SplitSeq(strings.ReplaceAll(unit, "\\\n", " "), "\n") {
		if rest, ok := strings.CutPrefix(l, "ExecStart="); ok {
			return strings.Fields(rest)
		}
	}
	return nil
}

// containerdDump has containerd load config and returns what it made of it.
func containerdDump(t *testing.T, containerd string, config map[string]any) map[string]any {
	t.Helper()
	merged := filepath.Join(t.TempDir(), "config.toml")
	f, err := os.Create(merged)
	if err != nil {
		t.Fatal(err)
	}
	if err := toml.NewEncoder(f).Encode(config); err != nil {
		t.Fatal(err)
	}
	f.Close()
	dump, err := exec.Command(containerd, "--config", merged, "config", "dump").Output()
	if err != nil {
		t.Fatalf("containerd config dump: %v\n%s", err, stderr(err))
	}
	var loaded map[string]any
	if _, err := toml.Decode(string(dump), &loaded); err != nil {
		t.Fatal(err)
	}
	return loaded
}

// TestWorkflow: the copyable workflow names files that exist and the kind
// config and manifests of this directory.
func TestWorkflow(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", ".github", "workflows", "kind-e2e.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var wf struct {
		Jobs map[string]struct {
			Steps []struct {
				Name, Run, Uses string
			} `json:"steps"`
		} `json:"jobs"`
	}
	if err := yaml.Unmarshal(b, &wf); err != nil {
		t.Fatalf("workflow: %v", err)
	}
	var runs strings.Builder
	for _, j := range wf.Jobs {
		for _, s := range j.Steps {
			runs.WriteString(s.Run + "\n")
		}
	}
	text := runs.String()
	for _, want := range []string{"hack/kind/build.sh", "hack/kind/up.sh", "examples/test-guest.yaml", "VMPOD_RUN_MODE=uninstall",
		"kubectl delete -k manifests/", "cgroup2fs", "cgroupDriver: systemd"} {
		if !strings.Contains(text, want) {
			t.Errorf("the workflow does not run %q", want)
		}
	}
	for _, f := range strings.Fields(text) {
		f = strings.Trim(f, `"';`)
		if strings.HasPrefix(f, "hack/") || strings.HasPrefix(f, "./test/") || strings.HasPrefix(f, "examples/") || strings.HasPrefix(f, "manifests/") {
			if _, err := os.Stat(filepath.Join("..", "..", f)); err != nil {
				t.Errorf("the workflow names %s: %v", f, err)
			}
		}
	}
}

func stderr(err error) []byte {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.Stderr
	}
	return nil
}
