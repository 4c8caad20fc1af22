package integration

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/cel/openapi/resolver"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/kubernetes/pkg/generated/openapi"

	"github.com/vmpod/vmpod/internal/testenv/controlplane"
	"github.com/vmpod/vmpod/internal/testenv/hostcaps"
	"github.com/vmpod/vmpod/pkg/host"
	"github.com/vmpod/vmpod/pkg/labeller"
)

// manifest decodes every object of a file in the repository's manifests/:
// the test applies the very files a cluster admin applies.
func manifest(t *testing.T, name string) []runtime.Object {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "manifests", name))
	if err != nil {
		t.Fatal(err)
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	var objs []runtime.Object
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		objs = append(objs, obj)
	}
}

// apply creates the namespace, the labeller's RBAC and its admission policy
// from manifests/. The DaemonSet is left out: nothing runs pods here.
func apply(ctx context.Context, t *testing.T, client kubernetes.Interface) {
	t.Helper()
	var objs []runtime.Object
	for _, f := range []string{"namespace.yaml", "labeller.yaml", "labeller-policy.yaml"} {
		objs = append(objs, manifest(t, f)...)
	}
	var err error
	for _, obj := range objs {
		switch o := obj.(type) {
		case *corev1.Namespace:
			_, err = client.CoreV1().Namespaces().Create(ctx, o, metav1.CreateOptions{})
		case *corev1.ServiceAccount:
			_, err = client.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRole:
			_, err = client.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRoleBinding:
			_, err = client.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
		case *admissionregistrationv1.ValidatingAdmissionPolicy:
			_, err = client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, o, metav1.CreateOptions{})
		case *admissionregistrationv1.ValidatingAdmissionPolicyBinding:
			_, err = client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, o, metav1.CreateOptions{})
		default:
			continue
		}
		if err != nil {
			t.Fatalf("create %T: %v", obj, err)
		}
	}
}

// labellerClient is a client with a token of the labeller's service
// account bound to boundTo on nodeName. "Pod" is what the kubelet gives the
// labeller's pod: a token bound to a pod that runs there. "Node" is what
// hack/local-up.sh gives its labeller process: a token bound to the node.
// "" is a token bound to nothing, which names no node.
func labellerClient(ctx context.Context, t *testing.T, admin kubernetes.Interface, cfg *rest.Config, boundTo, nodeName string) kubernetes.Interface {
	t.Helper()
	const ns, sa = "vmpod-system", "vmpod-labeller"
	req := &authenticationv1.TokenRequest{}
	switch boundTo {
	case "Node":
		req.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Node", APIVersion: "v1", Name: nodeName}
	case "Pod":
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "vmpod-labeller-" + nodeName, Namespace: ns},
			Spec: corev1.PodSpec{
				ServiceAccountName: sa,
				NodeName:           nodeName,
				Containers:         []corev1.Container{{Name: "labeller", Image: "localhost/vmpod/vm-runtime:dev"}},
			},
		}
		pod, err := admin.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		req.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}
	}
	tok, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, req, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := rest.AnonymousClientConfig(cfg)
	c.BearerToken = tok.Status.Token
	client, err := kubernetes.NewForConfig(c)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

func nodeWith(name string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Labels:      map[string]string{"kubernetes.io/hostname": name, "vmpod.io/kvm": "false"},
			Annotations: map[string]string{"example.com/owner": "admin"},
		},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "example.com/dedicated", Value: "vms", Effect: corev1.TaintEffectNoSchedule}}},
	}
}

// TestLabellerPolicy applies manifests/labeller-policy.yaml (with the
// labeller's RBAC from manifests/labeller.yaml) to a real apiserver and
// patches nodes with the labeller's own kind of credentials: a token bound
// to a pod of its service account on node vm-node-a.
func TestLabellerPolicy(t *testing.T) {
	cp := controlplane.Start(t, controlplane.Options{Authorization: "RBAC"})
	admin, cfg := cp.Client, cp.Config
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	apply(ctx, t, admin)
	for _, n := range []string{"vm-node-a", "vm-node-b"} {
		if _, err := admin.CoreV1().Nodes().Create(ctx, nodeWith(n), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	typeCheck(t, admin)
	onA := labellerClient(ctx, t, admin, cfg, "Pod", "vm-node-a")

	// The policy is enforced once the apiserver's informers have it: wait
	// until a request it refuses is refused by it (dry run: until then it
	// goes through).
	const taint = `{"spec":{"taints":[{"key":"example.com/dedicated","value":"vms","effect":"NoSchedule"},{"key":"x","effect":"NoExecute"}]}}`
	dryRun := metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, err := onA.CoreV1().Nodes().Patch(ctx, "vm-node-a", types.StrategicMergePatchType, []byte(taint), dryRun)
		if err != nil && strings.Contains(err.Error(), "vmpod-labeller may not change a node's spec") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the policy did not refuse a taint in 60s; last error: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}

	noNode := labellerClient(ctx, t, admin, cfg, "", "")
	nodeBoundA := labellerClient(ctx, t, admin, cfg, "Node", "vm-node-a")
	merge := func(meta string) []byte { return []byte(`{"metadata":` + meta + `}`) }
	for _, tc := range []struct {
		name    string
		client  kubernetes.Interface
		node    string
		patch   []byte
		pt      types.PatchType
		refusal string // "" when allowed
	}{
		{name: "own node, vmpod.io label", client: onA, node: "vm-node-a",
			patch: merge(`{"labels":{"vmpod.io/kvm":"true","vmpod.io/runtime":"true"}}`)},
		{name: "own node, labeller subdomain labels", client: onA, node: "vm-node-a",
			patch: merge(`{"labels":{"cpu-model.vmpod.io/Skylake-Client":"true","cpu-feature.vmpod.io/avx2":"true","machine.vmpod.io/pc-q35-7.2":"true"}}`)},
		{name: "own node, remove vmpod.io label", client: onA, node: "vm-node-a",
			patch: merge(`{"labels":{"vmpod.io/runtime":null}}`)},
		{name: "own node, vmpod.io annotation", client: onA, node: "vm-node-a",
			patch: merge(`{"annotations":{"vmpod.io/kvm-reason":"no /dev/kvm"}}`)},
		{name: "own node, foreign label", client: onA, node: "vm-node-a",
			patch:   merge(`{"labels":{"node-role.kubernetes.io/control-plane":""}}`),
			refusal: "vmpod-labeller may only change node labels under vmpod.io/, cpu-model.vmpod.io/, cpu-feature.vmpod.io/, machine.vmpod.io/, not node-role.kubernetes.io/control-plane"},
		{name: "own node, lookalike label", client: onA, node: "vm-node-a",
			patch:   merge(`{"labels":{"evilvmpod.io/kvm":"true"}}`),
			refusal: "not evilvmpod.io/kvm"},
		{name: "own node, remove foreign label", client: onA, node: "vm-node-a",
			patch:   merge(`{"labels":{"kubernetes.io/hostname":null}}`),
			refusal: "not kubernetes.io/hostname"},
		{name: "own node, foreign annotation", client: onA, node: "vm-node-a",
			patch:   merge(`{"annotations":{"example.com/owner":"labeller"}}`),
			refusal: "vmpod-labeller may only change node annotations under vmpod.io/, not example.com/owner"},
		{name: "own node, cpu-model annotation", client: onA, node: "vm-node-a",
			patch:   merge(`{"annotations":{"cpu-model.vmpod.io/x":"true"}}`),
			refusal: "vmpod-labeller may only change node annotations under vmpod.io/"},
		{name: "own node, remove taints", client: onA, node: "vm-node-a",
			patch: []byte(`{"spec":{"taints":null}}`), refusal: "vmpod-labeller may not change a node's spec"},
		{name: "own node, unschedulable", client: onA, node: "vm-node-a",
			patch: []byte(`{"spec":{"unschedulable":true}}`), refusal: "vmpod-labeller may not change a node's spec"},
		{name: "own node, finalizer", client: onA, node: "vm-node-a",
			patch: merge(`{"finalizers":["example.com/keep"]}`), refusal: "vmpod-labeller may not change a node's finalizers"},
		{name: "another node, vmpod.io label", client: onA, node: "vm-node-b",
			patch:   merge(`{"labels":{"vmpod.io/kvm":"true"}}`),
			refusal: "vmpod-labeller may only change the node its token names (vm-node-a), not node vm-node-b"},
		{name: "node-bound token, own node, vmpod.io label", client: nodeBoundA, node: "vm-node-a",
			patch: merge(`{"labels":{"vmpod.io/tcg":"true"}}`)},
		{name: "node-bound token, another node, vmpod.io label", client: nodeBoundA, node: "vm-node-b",
			patch:   merge(`{"labels":{"vmpod.io/kvm":"true"}}`),
			refusal: "vmpod-labeller may only change the node its token names (vm-node-a), not node vm-node-b"},
		{name: "no node in the token, vmpod.io label", client: noNode, node: "vm-node-a",
			patch:   merge(`{"labels":{"vmpod.io/kvm":"true"}}`),
			refusal: "vmpod-labeller may only change the node its token names (its credentials name no node), not node vm-node-a"},
		// An apply patch creates a missing object; RBAC asks for create
		// then and refuses before the policy (which also would) is asked.
		{name: "create a node by server-side apply", client: onA, node: "vm-node-c",
			pt:      types.ApplyPatchType,
			patch:   []byte(`{"apiVersion":"v1","kind":"Node","metadata":{"name":"vm-node-c","labels":{"vmpod.io/kvm":"true"}}}`),
			refusal: `cannot create resource "nodes"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pt := tc.pt
			if pt == "" {
				pt = types.MergePatchType
			}
			before, err := admin.CoreV1().Nodes().Get(ctx, tc.node, metav1.GetOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
			opts := metav1.PatchOptions{}
			if pt == types.ApplyPatchType {
				opts.FieldManager = labeller.FieldManager
			}
			_, err = tc.client.CoreV1().Nodes().Patch(ctx, tc.node, pt, tc.patch, opts)
			if tc.refusal == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.refusal) {
				t.Fatalf("got %v, want Forbidden with %q", err, tc.refusal)
			}
			after, err := admin.CoreV1().Nodes().Get(ctx, tc.node, metav1.GetOptions{})
			switch {
			case before == nil || apierrors.IsNotFound(err):
				if err == nil {
					t.Errorf("node %s was created", tc.node)
				}
			case err != nil:
				t.Fatal(err)
			case after.ResourceVersion != before.ResourceVersion:
				t.Errorf("node %s changed though the patch was refused", tc.node)
			}
		})
	}

	// The labeller itself, under the policy: its labels, its annotation and
	// its Warning event all go through.
	probed := hostcaps.Golden[host.Host](t, hostcaps.KVM)
	probed.Accels = []host.Accel{host.AccelTCG}
	probed.KVMReason = "no /dev/kvm"
	r := &labeller.Reconciler{Nodes: onA.CoreV1().Nodes(), NodeName: "vm-node-a", Events: onA.CoreV1(),
		Capabilities: func(context.Context) (host.Host, error) { return probed, nil }}
	c, err := r.Once(ctx)
	if err != nil {
		t.Fatalf("the labeller under the policy: %v", err)
	}
	if len(c.Set) == 0 {
		t.Error("the labeller set no label")
	}
	n, err := admin.CoreV1().Nodes().Get(ctx, "vm-node-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range labeller.Labels(probed) {
		if n.Labels[k] != v {
			t.Errorf("label %s=%q, want %q", k, n.Labels[k], v)
		}
	}
	if n.Labels["kubernetes.io/hostname"] != "vm-node-a" || len(n.Spec.Taints) != 1 {
		t.Errorf("labels %v, taints %v: the refused patches changed the node", n.Labels, n.Spec.Taints)
	}
}

// typeCheck type-checks the policy's expressions against the Node schema
// as kube-controller-manager does (it writes the warnings to the policy's
// status; this test runs no controller manager). A misspelt field is only
// a warning there, and the expression then fails on every request.
func typeCheck(t *testing.T, admin kubernetes.Interface) {
	t.Helper()
	checker := &validating.TypeChecker{
		SchemaResolver: resolver.NewDefinitionsSchemaResolver(openapi.GetOpenAPIDefinitions, scheme.Scheme),
		RestMapper:     restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(admin.Discovery())),
	}
	n := 0
	for _, obj := range manifest(t, "labeller-policy.yaml") {
		if p, ok := obj.(*admissionregistrationv1.ValidatingAdmissionPolicy); ok {
			n++
			for _, w := range checker.Check(p) {
				t.Errorf("policy %s: %s: %s", p.Name, w.FieldRef, w.Warning)
			}
		}
	}
	if n != 1 {
		t.Fatalf("labeller-policy.yaml holds %d policies, want 1", n)
	}
}
