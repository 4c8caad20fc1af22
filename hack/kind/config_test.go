// Package kind checks the kind cluster config and the workflow that uses it
// without Docker: the config is decoded with kind's own v1alpha4 API types
// (strictly, as kind does); its containerd patches are applied the way kind
// applies them (pkg/internal/patch.ContainerdTOML: a patch goes only into a
// config of its version, as a JSON merge patch) to the containerd config of
// the node image of the kind release in go.mod, which kind ships in its
// module, and to the same config migrated to version 3; containerd 2.4.2
// itself loads the results when it is built. The kind defaults vmpod
// relies on (the systemd cgroup driver) are read from that release too.
package kind

import (
	"fmt"
	"os"
	"os/exec"
	"path"
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

// TestClusterConfig: one containerd patch per config version, each with
// the runtime under that version's names, and every node mounts the shim.
func TestClusterConfig(t *testing.T) {
	c := loadCluster(t)
	versions := map[int]bool{}
	var shimDir string
	for i, p := range c.ContainerdConfigPatches {
		var patch map[string]any
		if _, err := toml.Decode(p, &patch); err != nil {
			t.Fatalf("containerd patch %d is not TOML: %v", i, err)
		}
		v := configVersion(patch)
		if runtimes[v] == nil {
			t.Fatalf("containerd patch %d has version %d: want 2, 3 or 4, set, so that kind applies it only to a config of that version", i, v)
		}
		if versions[v] {
			t.Errorf("two containerd patches for version %d", v)
		}
		versions[v] = true
		rt := checkRuntime(t, patch, runtimes[v])
		shimDir = path.Dir(rt["runtime_path"].(string))
	}
	for v := range runtimes {
		if !versions[v] {
			t.Errorf("no containerd patch for version %d (kind's node images: 2; containerd 2.x: 3 and 4)", v)
		}
	}

	for i, n := range c.Nodes {
		found := false
		for _, m := range n.ExtraMounts {
			if m.ContainerPath == shimDir {
				found = true
				if filepath.IsAbs(m.HostPath) || !strings.HasPrefix(m.HostPath, "_output/kind/") {
					t.Errorf("node %d mounts %q: want a path under _output/kind/, relative to the repository root where hack/kind/build.sh puts it", i, m.HostPath)
				}
			}
		}
		if !found {
			t.Errorf("node %d (%s) does not mount the shim's directory %s", i, n.Role, shimDir)
		}
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

// kindPatch applies containerd config patches as kind does
// (pkg/internal/patch.ContainerdTOML, internal to kind): a patch that sets
// a version other than the config's is skipped; the others are merge
// patches (tables merge, values replace). It returns the result and how
// many patches applied.
func kindPatch(t *testing.T, config string, patches []string) (map[string]any, int) {
	t.Helper()
	var m map[string]any
	if _, err := toml.Decode(config, &m); err != nil {
		t.Fatal(err)
	}
	version, applied := configVersion(m), 0
	if version == 0 {
		t.Fatal("the node config has no version; kind refuses to patch it")
	}
	for _, p := range patches {
		var patch map[string]any
		if _, err := toml.Decode(p, &patch); err != nil {
			t.Fatal(err)
		}
		if v := configVersion(patch); v != 0 && v != version {
			continue
		}
		merge(m, patch)
		applied++
	}
	return m, applied
}

// TestPatchOnKindNodeConfig applies the patches to kind's node config and
// to that config migrated by containerd 2.4.2 (to version 4, and the same
// marked version 3), as kind would, and has containerd load the results
// when it is built: exactly one patch applies, the vmpod runtime is there
// next to kind's runc.
func TestPatchOnKindNodeConfig(t *testing.T) {
	patches := loadCluster(t).ContainerdConfigPatches
	containerd := filepath.Join("..", "..", "_output", "bin", "containerd")
	haveContainerd := true
	if _, err := os.Stat(containerd); err != nil {
		haveContainerd = false
		t.Logf("containerd not built (hack/containerd/install.sh): not asking containerd itself, not migrating to version 3")
	}
	configs := map[int]string{2: kindNodeConfig(t)}
	if haveContainerd {
		base := filepath.Join(t.TempDir(), "kind-v2.toml")
		if err := os.WriteFile(base, []byte(configs[2]), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(containerd, "--config", base, "config", "migrate").Output()
		if err != nil {
			t.Fatalf("containerd config migrate: %v\n%s", err, stderr(err))
		}
		configs[4] = string(out)
		if !strings.HasPrefix(configs[4], "version = 4\n") {
			t.Fatalf("containerd config migrate made:\n%s", out)
		}
		configs[3] = "version = 3\n" + strings.TrimPrefix(configs[4], "version = 4\n")
	}
	for v, config := range configs {
		t.Run(fmt.Sprintf("version %d", v), func(t *testing.T) {
			node, applied := kindPatch(t, config, patches)
			if configVersion(node) != v {
				t.Fatalf("config version %d, want %d", configVersion(node), v)
			}
			if applied != 1 {
				t.Errorf("%d patches applied to a version %d config, want 1", applied, v)
			}
			checkRuntime(t, node, runtimes[v])
			checkKindRunc(t, node, runtimes[v])
			if !haveContainerd {
				return
			}
			loaded := containerdDump(t, containerd, node)
			checkRuntime(t, loaded, runtimes[4])
			checkKindRunc(t, loaded, runtimes[4])
		})
	}
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

// merge merges src into dst as a JSON merge patch (RFC 7386) without
// nulls, which TOML cannot express.
func merge(dst, src map[string]any) {
	for k, v := range src {
		if sm, ok := v.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				merge(dm, sm)
				continue
			}
		}
		dst[k] = v
	}
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
	for _, want := range []string{"hack/kind/build.sh", "--config hack/kind/cluster.yaml", "hack/kind/node-setup.sh", "kubectl apply -k hack/kind/manifests",
		"-tags e2e", "./test/e2e", "cgroup2fs", "cgroupDriver: systemd"} {
		if !strings.Contains(text, want) {
			t.Errorf("the workflow does not run %q", want)
		}
	}
	for _, f := range strings.Fields(text) {
		f = strings.Trim(f, `"';`)
		if strings.HasPrefix(f, "hack/") || strings.HasPrefix(f, "./test/") {
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
