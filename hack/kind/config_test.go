// Package kind checks the kind cluster config and the workflow that uses it
// without Docker: the config is decoded with kind's own v1alpha4 API types
// (strictly, as kind does), its containerd patch is parsed as TOML and
// merged into the containerd config of kind's node image the way kind
// merges it, and containerd 2.4.2 itself loads the result when it is built.
package kind

import (
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

// The runtime table in kind's version 2 containerd config, and where
// containerd 2.x puts it after migrating the file.
var (
	v2Runtimes = []string{"plugins", "io.containerd.grpc.v1.cri", "containerd", "runtimes"}
	v3Runtimes = []string{"plugins", "io.containerd.cri.v1.runtime", "containerd", "runtimes"}
)

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

func TestClusterConfig(t *testing.T) {
	c := loadCluster(t)
	if len(c.ContainerdConfigPatches) != 1 {
		t.Fatalf("%d containerd patches, want 1", len(c.ContainerdConfigPatches))
	}
	var patch map[string]any
	if _, err := toml.Decode(c.ContainerdConfigPatches[0], &patch); err != nil {
		t.Fatalf("the containerd patch is not TOML: %v", err)
	}
	rt := checkRuntime(t, patch, v2Runtimes)

	// Every node mounts the directory the runtime's shim is in.
	shimDir := path.Dir(rt["runtime_path"].(string))
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

// TestPatchOnKindNodeConfig merges the patch into the containerd config of
// the node image of the kind release in go.mod (kind ships it in its
// module), as kind does (a TOML merge: tables merge, values replace), and
// has containerd 2.4.2 load the result when it is built: the vmpod
// runtime must be there next to kind's runc.
func TestPatchOnKindNodeConfig(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/kind").Output()
	if err != nil {
		t.Fatalf("go list sigs.k8s.io/kind: %v", err)
	}
	base := filepath.Join(strings.TrimSpace(string(out)), "images", "base", "files", "etc", "containerd", "config.toml")
	var node map[string]any
	if _, err := toml.DecodeFile(base, &node); err != nil {
		t.Fatalf("kind's node containerd config: %v", err)
	}
	for _, p := range loadCluster(t).ContainerdConfigPatches {
		var patch map[string]any
		if _, err := toml.Decode(p, &patch); err != nil {
			t.Fatal(err)
		}
		merge(node, patch)
	}
	checkRuntime(t, node, v2Runtimes)
	if lookup(node, append(slices.Clone(v2Runtimes), "runc")...) == nil {
		t.Error("the merge lost kind's runc runtime")
	}

	containerd := filepath.Join("..", "..", "_output", "bin", "containerd")
	if _, err := os.Stat(containerd); err != nil {
		t.Logf("containerd not built (hack/containerd/install.sh): not asking containerd itself")
		return
	}
	merged := filepath.Join(t.TempDir(), "config.toml")
	f, err := os.Create(merged)
	if err != nil {
		t.Fatal(err)
	}
	if err := toml.NewEncoder(f).Encode(node); err != nil {
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
	checkRuntime(t, loaded, v3Runtimes)
}

// merge merges src into dst as kind merges containerd patches.
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
	for _, want := range []string{"hack/kind/build.sh", "--config hack/kind/cluster.yaml", "hack/kind/node-setup.sh", "kubectl apply -k hack/kind/manifests", "./test/e2e"} {
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
