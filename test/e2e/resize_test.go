//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestResize: in-place pod resize (kubectl patch --subresource resize) of
// a VM pod of a Deployment, on both kinds of node. The pod has room for
// 512Mi (vmpod.io/max-memory) and, without asking, the node's default
// room in vCPUs (its CPUs, at most vm-runtime's --default-max-vcpus of
// 4; a pod on a 1-CPU node asks for room for 2 itself), and starts with 1 vCPU and 256Mi. CPU 1 -> 2 -> 1 and memory
// 256Mi -> 512Mi happen live: the pod's status shows each size, the
// guest's nproc and MemTotal agree, and the VM never restarts. A CPU
// limit above the room is refused with vmpod's reason in the
// PodResizeInProgress condition, the VM untouched. A pod whose
// resizePolicy says RestartContainer comes back at the new size with
// one restart.
func TestResize(t *testing.T) {
	checkLeaks(t)
	for _, d := range frontDoors(t) {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			d.testResize(t)
		})
	}
}

func (d frontDoor) testResize(t *testing.T) {
	ctx := context.Background()
	name := uniqueName("resize")
	sel := map[string]string{"app": name}
	tmpl := vmTemplate(sel)
	d.place(&tmpl.Spec)
	tmpl.Annotations = map[string]string{"vmpod.io/max-memory": "512Mi"}
	// The default room stops at the node's CPUs: a node of one has none,
	// and the pod then asks for room for 2 itself.
	room, byDefault := defaultRoom(t, d.node.name), true
	if room < 2 {
		room, byDefault = 2, false
		tmpl.Annotations["vmpod.io/max-vcpus"] = "2"
	}
	// Burstable, so that the CPU limit can rise beyond what a 2-core node
	// could grant as a request.
	tmpl.Spec.Containers[0].Resources.Requests[corev1.ResourceMemory] = resource.MustParse("256Mi")
	deps := client.AppsV1().Deployments(namespace)
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec:       appsv1.DeploymentSpec{Replicas: new(int32(1)), Selector: &metav1.LabelSelector{MatchLabels: sel}, Template: tmpl},
	}
	if _, err := deps.Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deleteAtCleanup(t, "deployment", name, sel, deps.Delete)

	// The RestartContainer pod boots meanwhile.
	restarting := makePod("resize-restart").grace(10).restart(corev1.RestartPolicyAlways).
		annotation("vmpod.io/max-vcpus", "2")
	d.place(&restarting.pod.Spec)
	restarting.pod.Spec.Containers[0].ResizePolicy = []corev1.ContainerResizePolicy{
		{ResourceName: corev1.ResourceCPU, RestartPolicy: corev1.RestartContainer}}
	rp := create(t, restarting.obj())

	waitDeployment(t, name, 1)
	pod := podsOf(t, sel)[0].Name
	waitLog(t, pod, "VMPOD-GUEST: ready")
	base := d.guestSize(t, pod, 1, 0)

	d.resize(t, pod, "2", "256Mi", "vCPU 1 -> 2")
	d.guestSize(t, pod, 2, base)
	d.resize(t, pod, "2", "512Mi", "memory 256Mi -> 512Mi")
	d.guestSize(t, pod, 2, base+256<<10)
	d.resize(t, pod, "1", "512Mi", "vCPU 2 -> 1")
	d.guestSize(t, pod, 1, base+256<<10)

	// Above the room: refused, with the reason, and the VM as it was.
	patchResize(t, pod, strconv.Itoa(room+1), "512Mi")
	var msg string
	if !poll(2*time.Minute, func() bool {
		for _, c := range getPod(t, pod).Status.Conditions {
			if c.Type == corev1.PodResizeInProgress && c.Reason == corev1.PodReasonError {
				msg = c.Message
				return true
			}
		}
		return false
	}) {
		t.Fatalf("a resize above the room: no PodResizeInProgress condition with reason Error in 2m: %+v", getPod(t, pod).Status.Conditions)
	}
	want := fmt.Sprintf("above %d, the most vCPUs this VM can have (the node's default room", room)
	if !byDefault {
		want = "above vmpod.io/max-vcpus=2, the most vCPUs this VM can have"
	}
	if !strings.Contains(msg, want) {
		t.Errorf("the refused resize's condition says %q, want vmpod's reason: %q", msg, want)
	}
	t.Logf("refused: %s", msg)
	d.guestSize(t, pod, 1, base+256<<10)
	if n := getPod(t, pod).Status.ContainerStatuses[0].RestartCount; n != 0 {
		t.Errorf("the VM restarted %d times during live resizes, want 0", n)
	}

	// resizePolicy RestartContainer: the VM restarts at the new size.
	waitLog(t, rp.Name, "VMPOD-GUEST: ready")
	d.resize(t, rp.Name, "2", "256Mi", "vCPU 1 -> 2 by restart")
	if !poll(2*time.Minute, func() bool {
		cs := getPod(t, rp.Name).Status.ContainerStatuses
		return len(cs) == 1 && cs[0].RestartCount == 1 && cs[0].Ready
	}) {
		t.Fatalf("the RestartContainer pod did not restart once and come back Ready: %+v", getPod(t, rp.Name).Status.ContainerStatuses)
	}
	if !poll(time.Minute, func() bool {
		out, _, code := kubectl(t, time.Minute, "exec", rp.Name, "--", "nproc")
		return code == 0 && strings.TrimSpace(out) == "2"
	}) {
		t.Errorf("the restarted VM does not have 2 vCPUs online")
	}
}

// defaultRoom is the most vCPUs a VM pod that sets no vmpod.io/max-vcpus
// can grow to on node: its CPUs, at most vm-runtime's --default-max-vcpus
// (4, the default, which the test cluster keeps). For "" (a pod placed
// by the scheduler alone) it is the least over the cluster's nodes.
func defaultRoom(t *testing.T, node string) int {
	t.Helper()
	nodes, err := client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	room := 4
	for _, n := range nodes.Items {
		if node == "" || n.Name == node {
			room = min(room, int(n.Status.Capacity.Cpu().Value()))
		}
	}
	return room
}

// patchResize asks for new CPU and memory limits (the memory request
// follows the limit) through the resize subresource.
func patchResize(t *testing.T, pod, cpu, memory string) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"containers":[{"name":"vm","resources":{"limits":{"cpu":%q,"memory":%q},"requests":{"memory":%q}}}]}}`, cpu, memory, memory)
	if out, errOut, code := kubectl(t, time.Minute, "patch", "pod", pod, "--subresource", "resize", "-p", patch); code != 0 {
		t.Fatalf("resize %s to cpu %s, memory %s: exit %d: %s%s", pod, cpu, memory, code, out, errOut)
	}
}

// resize patches the pod's limits and waits until its status shows them
// and no resize is in progress: the kubelet's word that the runtime
// applied them. It logs how long that took.
func (d frontDoor) resize(t *testing.T, pod, cpu, memory, what string) {
	t.Helper()
	start := time.Now()
	patchResize(t, pod, cpu, memory)
	wantCPU, wantMem := resource.MustParse(cpu), resource.MustParse(memory)
	var last string
	if !poll(3*time.Minute, func() bool {
		p := getPod(t, pod)
		last = ""
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodResizeInProgress || c.Type == corev1.PodResizePending {
				last = fmt.Sprintf("%s %s: %s", c.Type, c.Reason, c.Message)
				return false
			}
		}
		if len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].Resources == nil {
			return false
		}
		l := p.Status.ContainerStatuses[0].Resources.Limits
		return l.Cpu().Cmp(wantCPU) == 0 && l.Memory().Cmp(wantMem) == 0
	}) {
		t.Fatalf("%s: the pod's status does not show cpu %s, memory %s after 3m (%s): %+v",
			what, cpu, memory, last, getPod(t, pod).Status.ContainerStatuses)
	}
	t.Logf("%s: %s: done in %v", d.name, what, time.Since(start).Round(10*time.Millisecond))
}

// guestSize checks the guest's nproc and returns its MemTotal in KiB;
// with wantKiB > 0 that must be it.
func (d frontDoor) guestSize(t *testing.T, pod string, vcpus int, wantKiB int) int {
	t.Helper()
	var out string
	var fields []string
	// A vCPU taken offline may still show for a moment.
	poll(30*time.Second, func() bool {
		out = guestExec(t, pod, "sh", "-c", `echo $(nproc) $(sed -n 's/^MemTotal: *\([0-9]*\) kB/\1/p' /proc/meminfo)`)
		fields = strings.Fields(out)
		return len(fields) == 2 && fields[0] == strconv.Itoa(vcpus)
	})
	if len(fields) != 2 {
		t.Fatalf("the guest's nproc and MemTotal: %q", out)
	}
	kib, err := strconv.Atoi(fields[1])
	if fields[0] != strconv.Itoa(vcpus) || err != nil || wantKiB > 0 && kib != wantKiB {
		t.Fatalf("the guest has %s vCPUs online and %s KiB of memory, want %d and %d KiB", fields[0], fields[1], vcpus, wantKiB)
	}
	return kib
}
