package manifests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	restclient "k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/kustomize/api/krusty"
	kusttypes "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/vmpod/vmpod/internal/testenv/controlplane"
	"github.com/vmpod/vmpod/internal/testenv/repo"
	"github.com/vmpod/vmpod/pkg/vmspec"
)

// kustomizations are the directories users, hack/local-up.sh and the kind
// workflow apply with `kubectl apply -k` (examples/workloads: VM pods in a
// Deployment, a Service, a PDB), relative to the repository root.
var kustomizations = []string{"manifests", "hack/local/manifests", "examples/workloads"}

// fieldManager is what `kubectl apply --server-side` would say.
const fieldManager = "vmpod-manifests-test"

// build runs kustomize over dir as `kubectl apply -k dir` does.
func build(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	rm, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	b, err := rm.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	for {
		var m map[string]any
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		if m != nil {
			objs = append(objs, &unstructured.Unstructured{Object: m})
		}
	}
	if len(objs) == 0 {
		t.Fatalf("%s builds no objects", dir)
	}
	return objs
}

func find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

func id(o *unstructured.Unstructured) string {
	if o.GetNamespace() != "" {
		return fmt.Sprintf("%s %s/%s", o.GetKind(), o.GetNamespace(), o.GetName())
	}
	return o.GetKind() + " " + o.GetName()
}

// TestManifests applies every object of each kustomization to a real
// kube-apiserver with server-side apply and dry-run (`kubectl apply
// --server-side --dry-run=server -k DIR`): the schema, defaulting,
// validation and admission run, nothing is stored. The namespaces are
// created for real first, as namespace lifecycle admission refuses objects
// in a namespace that does not exist.
func TestManifests(t *testing.T) {
	root := repo.Root(t)
	built := map[string][]*unstructured.Unstructured{}
	for _, k := range kustomizations {
		built[k] = build(t, filepath.Join(root, k))
	}
	// The installer and the labeller are privileged, as kubeadm and kind
	// clusters allow.
	cp := controlplane.Start(t, controlplane.Options{AllowPrivileged: true})
	apply := applier(t, cp.Config)

	for _, o := range built["manifests"] {
		if o.GetKind() == "Namespace" {
			if err := apply(o, false); err != nil {
				t.Fatalf("create %s: %v", id(o), err)
			}
		}
	}
	for _, k := range kustomizations {
		t.Run(k, func(t *testing.T) {
			for _, o := range built[k] {
				if err := apply(o, true); err != nil {
					t.Errorf("%s: %v", id(o), err)
				}
			}
		})
	}
	t.Run("scheduler config", func(t *testing.T) { checkSchedulerConfig(t, cp.Kubeconfig(t), built["manifests"]) })
}

// applier returns a function that server-side applies one object.
func applier(t *testing.T, cfg *restclient.Config) func(o *unstructured.Unstructured, dryRun bool) error {
	t.Helper()
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))
	return func(o *unstructured.Unstructured, dryRun bool) error {
		gvk := o.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return err
		}
		body, err := o.MarshalJSON()
		if err != nil {
			return err
		}
		opts := metav1.PatchOptions{FieldManager: fieldManager, Force: new(true)}
		if dryRun {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if o.GetNamespace() != "" {
			ri = dyn.Resource(m.Resource).Namespace(o.GetNamespace())
		}
		_, err = ri.Patch(context.Background(), o.GetName(), types.ApplyPatchType, body, opts)
		return err
	}
}

// TestEveryFileIsApplied keeps manifests/ and its kustomization in step: a
// manifest that kustomization.yaml does not name would never be applied
// (nor tested here). manifests/systemd/ holds a node's files, not the
// cluster's: cmd/vm-runtime tests the cri unit against the flags, and the
// daemon's unit reaches the nodes in the installer's ConfigMap
// (TestDaemonUnitReachesTheNodes).
func TestEveryFileIsApplied(t *testing.T) {
	dir := filepath.Join(repo.Root(t), "manifests")
	b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k kusttypes.Kustomization
	if err := yaml.UnmarshalStrict(b, &k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	named := slices.Clone(k.Resources)
	for _, g := range k.ConfigMapGenerator {
		named = append(named, g.FileSources...)
	}
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && p == filepath.Join(dir, "systemd") {
			return filepath.SkipDir
		}
		if err != nil || d.IsDir() || d.Name() == "kustomization.yaml" {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if !slices.Contains(named, rel) {
			t.Errorf("manifests/%s is not in manifests/kustomization.yaml", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestRuntimeClass checks the RuntimeClass against the code it stands for:
// the handler containerd is configured with, the overhead model's podFixed,
// and the label the labeller writes.
func TestRuntimeClass(t *testing.T) {
	objs := build(t, filepath.Join(repo.Root(t), "manifests"))
	for _, e := range vmspec.Envelopes {
		o := find(objs, "RuntimeClass", e.RuntimeClass)
		if o == nil {
			t.Errorf("no RuntimeClass %s", e.RuntimeClass)
			continue
		}
		var rc nodev1.RuntimeClass
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &rc); err != nil {
			t.Fatal(err)
		}
		if rc.Handler != "vmpod" {
			t.Errorf("%s: handler %q, want vmpod (the containerd runtime name)", e.RuntimeClass, rc.Handler)
		}
		// docs/overhead.md: the envelope of the overhead model over the VM
		// sizes the RuntimeClass covers.
		want := resource.NewQuantity(int64(e.PodFixedBytes()), resource.BinarySI)
		if rc.Overhead == nil {
			t.Errorf("%s: no overhead", e.RuntimeClass)
			continue
		}
		if got := rc.Overhead.PodFixed.Memory(); got.Cmp(*want) != 0 {
			t.Errorf("%s: overhead.podFixed.memory %s, want %s (vmspec.Envelopes)", e.RuntimeClass, got, want)
		}
		wantSel := map[string]string{vmspec.LabelRuntime: "true"}
		if rc.Scheduling == nil || !equalMaps(rc.Scheduling.NodeSelector, wantSel) {
			t.Errorf("%s: scheduling %+v, want nodeSelector %v", e.RuntimeClass, rc.Scheduling, wantSel)
		}
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestImagesArePlaceholders: users point the images at their own builds
// with kustomize; nothing in manifests/ names a registry.
func TestImagesArePlaceholders(t *testing.T) {
	for _, o := range build(t, filepath.Join(repo.Root(t), "manifests")) {
		for _, path := range [][]string{{"spec", "template", "spec", "containers"}, {"spec", "template", "spec", "initContainers"}} {
			cs, _, _ := unstructured.NestedSlice(o.Object, path...)
			for _, c := range cs {
				img, _ := c.(map[string]any)["image"].(string)
				if !strings.HasPrefix(img, "localhost/vmpod/") {
					t.Errorf("%s: image %q is not a localhost/vmpod/ placeholder", id(o), img)
				}
			}
		}
	}
}
