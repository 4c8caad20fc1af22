package integration

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vmpod/vmpod/internal/testenv/controlplane"
	"github.com/vmpod/vmpod/internal/testenv/hostcaps"
	"github.com/vmpod/vmpod/pkg/host"
	"github.com/vmpod/vmpod/pkg/labeller"
	"github.com/vmpod/vmpod/pkg/vmspec"
)

// TestLabellerAgainstAPIServer labels a Node of a real apiserver from a
// TCG host, then from a KVM host, and checks that its labels follow while
// every label it does not own stays as it was, including ones that look
// like its own.
func TestLabellerAgainstAPIServer(t *testing.T) {
	client := controlplane.Start(t, controlplane.Options{}).Client
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	nodes := client.CoreV1().Nodes()

	foreign := map[string]string{
		"kubernetes.io/hostname":      "vm-node-1",
		"kubernetes.io/os":            "linux",
		"example.com/kvm":             "true", // looks like ours, is not
		"vmpod.io/pool":               "gold", // under the shared prefix, not ours
		"cpu-model.example.com/x":     "true",
		"topology.kubernetes.io/zone": "a",
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "vm-node-1", Labels: maps.Clone(foreign)}}
	if _, err := nodes.Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		err := nodes.Delete(context.Background(), node.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete node: %v", err)
		}
	})

	current := hostcaps.Golden[host.Host](t, hostcaps.TCG)
	r := &labeller.Reconciler{
		Nodes:        nodes,
		NodeName:     node.Name,
		Events:       client.CoreV1(),
		Capabilities: func(context.Context) (host.Host, error) { return current, nil },
	}
	check := func(what string, h host.Host) {
		t.Helper()
		n, err := nodes.Get(ctx, node.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := maps.Clone(foreign)
		maps.Copy(want, labeller.Labels(h))
		if diff := cmp.Diff(want, n.Labels); diff != "" {
			t.Errorf("%s: node labels (-want +got):\n%s", what, diff)
		}
	}

	c, err := r.Once(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Set) == 0 || len(c.Remove) != 0 {
		t.Errorf("first run changed %d set, %d removed; want only sets", len(c.Set), len(c.Remove))
	}
	check("TCG host", current)
	if c, err := r.Once(ctx); err != nil || !c.Empty() {
		t.Errorf("second run = %+v, %v; want no change", c, err)
	}

	// Another writer changes a foreign label meanwhile: the labeller's
	// patch must not put the old value back.
	foreign["vmpod.io/pool"] = "silver"
	patch := []byte(`{"metadata":{"labels":{"vmpod.io/pool":"silver"}}}`)
	if _, err := nodes.Patch(ctx, node.Name, "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}

	current = hostcaps.Golden[host.Host](t, hostcaps.KVM)
	c, err = r.Once(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Set) == 0 || len(c.Remove) == 0 {
		t.Errorf("TCG -> KVM changed %d set, %d removed; want both", len(c.Set), len(c.Remove))
	}
	check("KVM host", current)
	for _, k := range c.Remove {
		if !labeller.Owns(k) {
			t.Errorf("removed %s, which the labeller does not own", k)
		}
	}
}

// TestKVMReasonAgainstAPIServer: where the KVM probe failed, the node says
// kvm=false, the annotation says why, and a Warning event on the Node says
// it once; once KVM works, the annotation goes.
func TestKVMReasonAgainstAPIServer(t *testing.T) {
	client := controlplane.Start(t, controlplane.Options{}).Client
	ctx := context.Background()
	nodes := client.CoreV1().Nodes()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "vm-node-2",
		Annotations: map[string]string{"vmpod.io/note": "an admin's, not ours"}}}
	if _, err := nodes.Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const why = "a guest under KVM failed: QEMU exited with status 1: failed to set MSR 0x10a"
	probed, err := host.Parse(hostcaps.Caps(t, hostcaps.KVM), hostcaps.DomCaps(t, hostcaps.TCG), host.WithoutKVM(why))
	if err != nil {
		t.Fatal(err)
	}
	current := probed
	r := &labeller.Reconciler{Nodes: nodes, NodeName: node.Name, Events: client.CoreV1(),
		Capabilities: func(context.Context) (host.Host, error) { return current, nil }}
	for range 2 { // the second run changes nothing and records no second event
		if _, err := r.Once(ctx); err != nil {
			t.Fatal(err)
		}
	}
	n, err := nodes.Get(ctx, node.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"vmpod.io/note": "an admin's, not ours", vmspec.AnnotationNodeKVMReason: why}
	if diff := cmp.Diff(want, n.Annotations); diff != "" {
		t.Errorf("annotations (-want +got):\n%s", diff)
	}
	if n.Labels[vmspec.LabelKVM] != "false" || n.Labels[vmspec.LabelTCG] != "true" {
		t.Errorf("labels kvm=%q tcg=%q, want false and true", n.Labels[vmspec.LabelKVM], n.Labels[vmspec.LabelTCG])
	}
	evs, err := client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{
		FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + node.Name})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs.Items) != 1 {
		t.Fatalf("%d events on the node, want 1: %+v", len(evs.Items), evs.Items)
	}
	if ev := evs.Items[0]; ev.Reason != labeller.EventReasonKVMUnusable || ev.Type != corev1.EventTypeWarning ||
		!strings.Contains(ev.Message, why) || ev.InvolvedObject.UID != n.UID {
		t.Errorf("event %+v", ev)
	}

	current = hostcaps.Golden[host.Host](t, hostcaps.KVM)
	if _, err := r.Once(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err = nodes.Get(ctx, node.Name, metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, ok := n.Annotations[vmspec.AnnotationNodeKVMReason]; ok || n.Labels[vmspec.LabelKVM] != "true" {
		t.Errorf("KVM works now, but annotations %v, kvm=%q", n.Annotations, n.Labels[vmspec.LabelKVM])
	}
}
