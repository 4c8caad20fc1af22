//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	resourcehelper "k8s.io/component-helpers/resource"
)

// containerdNode returns the name of the node whose VM pods run through
// containerd: the labelled vmpod node that is not the VM-only one.
func containerdNode(t *testing.T) string {
	t.Helper()
	l, err := client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{LabelSelector: "vmpod.io/runtime=true"})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range l.Items {
		if criNode == nil || n.Name != criNode.name {
			return n.Name
		}
	}
	t.Fatal("no vmpod node besides the VM-only one")
	return ""
}

// setUnschedulable cordons or uncordons a node.
func setUnschedulable(t *testing.T, name string, on bool) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, on)
	if _, err := client.CoreV1().Nodes().Patch(context.Background(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Errorf("node %s unschedulable=%t: %v", name, on, err)
	}
}

// TestDrain: kubectl drain of the containerd node evicts its VM pods
// through the eviction API, one at a time as their PodDisruptionBudget
// (minAvailable 1 of 2) allows; each guest powers off by ACPI within its
// grace period, and the Deployment's replacements start on the VM-only
// node (they tolerate its taint), so the drain ends.
func TestDrain(t *testing.T) {
	checkLeaks(t)
	if criNode == nil {
		t.Fatal("the cluster has no VM-only node: the replacements would have nowhere to go")
	}
	cnode := containerdNode(t)
	// Whatever happens, both nodes take pods again afterwards.
	t.Cleanup(func() {
		setUnschedulable(t, cnode, false)
		setUnschedulable(t, criNode.name, false)
	})
	name := uniqueName("drain")
	sel := map[string]string{"app": name}
	tmpl := vmTemplate(sel)
	frontDoor{node: criNode}.place(&tmpl.Spec)
	delete(tmpl.Spec.NodeSelector, corev1.LabelHostname) // either node: the toleration stays
	const grace = 60
	tmpl.Spec.TerminationGracePeriodSeconds = new(int64(grace))
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: new(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: sel}},
	}
	pdbs := client.PolicyV1().PodDisruptionBudgets(namespace)
	if _, err := pdbs.Create(context.Background(), pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deleteAtCleanup(t, "pdb", name, nil, pdbs.Delete)

	// The first pods on the containerd node: the VM-only node cordoned
	// while they are placed.
	setUnschedulable(t, criNode.name, true)
	deps := client.AppsV1().Deployments(namespace)
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec:       appsv1.DeploymentSpec{Replicas: new(int32(2)), Selector: &metav1.LabelSelector{MatchLabels: sel}, Template: tmpl},
	}
	if _, err := deps.Create(context.Background(), dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deleteAtCleanup(t, "deployment", name, sel, deps.Delete)
	waitDeployment(t, name, 2)
	setUnschedulable(t, criNode.name, false)
	first := podsOf(t, sel)
	rests := map[string]func() string{}
	for _, p := range first {
		if p.Spec.NodeName != cnode {
			t.Fatalf("pod %s on %s, want %s", p.Name, p.Spec.NodeName, cnode)
		}
		waitLog(t, p.Name, "VMPOD-GUEST: ready")
		rests[p.Name] = followLog(t, p.Name)
	}

	low := watchAvailable(t, name)
	start := time.Now()
	out, errOut, code := kubectl(t, 8*time.Minute, "drain", cnode, "--pod-selector", "app="+name, "--timeout", "7m")
	took := time.Since(start)
	if code != 0 {
		t.Fatalf("kubectl drain %s: exit %d:\n%s%s", cnode, code, out, errOut)
	}
	t.Logf("kubectl drain of 2 VM pods (PDB minAvailable 1): %v", took.Round(100*time.Millisecond))
	if min := low(); min < 1 {
		t.Errorf("during the drain the Deployment had %d available, below the PDB's minAvailable 1", min)
	}
	if !strings.Contains(out+errOut, "evicting pod") {
		t.Errorf("kubectl drain did not evict (no \"evicting pod\"):\n%s%s", out, errOut)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for name, rest := range rests {
		wg.Go(func() {
			log := rest()
			mu.Lock()
			defer mu.Unlock()
			if !strings.Contains(log, "VMPOD-GUEST: poweroff") {
				t.Errorf("evicted pod %s: no ACPI poweroff on its serial console:\n%s", name, log)
			}
		})
	}
	wg.Wait()
	waitDeployment(t, name, 2)
	for _, p := range podsOf(t, sel) {
		if p.Spec.NodeName != criNode.name {
			t.Errorf("replacement %s on %s, want the VM-only node %s", p.Name, p.Spec.NodeName, criNode.name)
		}
	}
}

// TestOverheadCountedOnce fills the containerd node's allocatable CPU with
// VM pods, one after the other, each requesting what leaves exactly room
// for the rest with the RuntimeClass's overhead counted once: the kubelet
// admits every one the scheduler placed (a kubelet that counted the
// running pods' overhead twice rejects the last ones with OutOfcpu).
func TestOverheadCountedOnce(t *testing.T) {
	checkLeaks(t)
	cnode := containerdNode(t)
	n, err := client.CoreV1().Nodes().Get(context.Background(), cnode, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rc, err := client.NodeV1().RuntimeClasses().Get(context.Background(), "vmpod", metav1.GetOptions{})
	if err != nil || rc.Overhead == nil {
		t.Fatalf("RuntimeClass vmpod and its overhead: %v", err)
	}
	overhead := rc.Overhead.PodFixed.Cpu().MilliValue()
	pods, err := client.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{FieldSelector: "spec.nodeName=" + cnode})
	if err != nil {
		t.Fatal(err)
	}
	var used int64
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			r := resourcehelper.PodRequests(&p, resourcehelper.PodResourcesOptions{})
			used += r.Cpu().MilliValue()
		}
	}
	const count = 4
	free := n.Status.Allocatable.Cpu().MilliValue() - used
	request := free/count - overhead
	if request < 10 {
		t.Fatalf("node %s: %dm CPU free of %v, too little for %d VM pods with %dm overhead", cnode, free, n.Status.Allocatable.Cpu(), count, overhead)
	}
	t.Logf("node %s: %dm free; %d VM pods of %dm + %dm overhead", cnode, free, count, request, overhead)
	for i := range count {
		b := makePod(fmt.Sprintf("fill%d", i)).grace(30)
		b.pod.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = *resource.NewMilliQuantity(request, resource.DecimalSI)
		p := create(t, b.obj())
		var got *corev1.Pod
		if !poll(bootTimeout, func() bool {
			got = getPod(t, p.Name)
			return got.Status.Phase != corev1.PodPending
		}) || got.Status.Phase != corev1.PodRunning {
			t.Fatalf("VM pod %d of %d (%s) is %s, not Running: %s %s\n%s", i+1, count, p.Name, got.Status.Phase,
				got.Status.Reason, got.Status.Message, describe(p.Name))
		}
		if got.Spec.NodeName != cnode {
			t.Fatalf("VM pod %s on %s, want %s", p.Name, got.Spec.NodeName, cnode)
		}
	}
}
