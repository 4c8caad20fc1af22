//go:build e2e

package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// A front door is a kind of node a VM pod runs on: containerd with the
// shim, or a VM-only node whose kubelet talks to vm-runtime cri. Every
// workload test runs on both (issue 23: "both front doors behave the
// same").
type frontDoor struct {
	name string
	node *testNode
}

func frontDoors(t *testing.T) []frontDoor {
	t.Helper()
	if criNode == nil {
		t.Fatal("the cluster has no VM-only node (VMPOD_E2E_CRI_NODE is unset): the e2e suite needs the one hack/local-up.sh makes")
	}
	return []frontDoor{{"containerd", node}, {"vm-runtime-cri", criNode}}
}

// place puts a pod spec on the door's node: the VM-only node by name,
// tolerating its taint; the containerd node is the one an untolerating
// VM pod goes to.
func (d frontDoor) place(spec *corev1.PodSpec) {
	if d.node.name == "" {
		return
	}
	spec.NodeSelector = map[string]string{corev1.LabelHostname: d.node.name}
	spec.Tolerations = append(spec.Tolerations, corev1.Toleration{Key: vmOnlyTaint, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule})
}

// vmTemplate is a pod template of the test guest with the labels, Ready
// when its HTTP server answers on 8080 (the kubelet's TCP probe, from the
// node, as for any pod).
func vmTemplate(lbls map[string]string) corev1.PodTemplateSpec {
	spec := makePod("x").grace(30).obj().Spec
	spec.RestartPolicy = corev1.RestartPolicyAlways
	spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}
	spec.Containers[0].ReadinessProbe = &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}},
		PeriodSeconds: 2,
	}
	return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: lbls}, Spec: spec}
}

// uniqueName is prefix-<6 hex digits>.
func uniqueName(prefix string) string {
	b := make([]byte, 3)
	rand.Read(b)
	return prefix + "-" + hex.EncodeToString(b)
}

// podsOf lists the pods of a label selector.
func podsOf(t *testing.T, sel map[string]string) []corev1.Pod {
	t.Helper()
	l, err := client.CoreV1().Pods(namespace).List(context.Background(), metav1.ListOptions{LabelSelector: labels.SelectorFromSet(sel).String()})
	if err != nil {
		t.Fatalf("list pods %v: %v", sel, err)
	}
	return l.Items
}

// waitNoPods waits until no pod of the selector is left.
func waitNoPods(t *testing.T, sel map[string]string) {
	t.Helper()
	if !poll(deleteTimeout, func() bool { return len(podsOf(t, sel)) == 0 }) {
		t.Fatalf("pods %v still there %v later: %d", sel, deleteTimeout, len(podsOf(t, sel)))
	}
}

// deleteAll deletes an object at cleanup (foreground: its pods first) and
// waits until its pods are gone.
func deleteAtCleanup(t *testing.T, kind, name string, sel map[string]string, del func(context.Context, string, metav1.DeleteOptions) error) {
	t.Cleanup(func() {
		fg := metav1.DeletePropagationForeground
		if err := del(context.Background(), name, metav1.DeleteOptions{PropagationPolicy: &fg}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete %s %s: %v", kind, name, err)
		}
		if sel != nil {
			waitNoPods(t, sel)
		}
	})
}

// vmDeployment makes a Deployment of replicas VM pods (vmTemplate, which
// edit, if not nil, changes) on the door's node, deleted at cleanup, and
// waits until it is Available. It returns the Deployment's name, its pods'
// selector, and a scale to 0 that waits until the pods are gone.
func (d frontDoor) vmDeployment(t *testing.T, prefix string, replicas int, edit func(*corev1.PodTemplateSpec)) (string, map[string]string, func()) {
	t.Helper()
	name := uniqueName(prefix)
	sel := map[string]string{"app": name}
	tmpl := vmTemplate(sel)
	if edit != nil {
		edit(&tmpl)
	}
	d.place(&tmpl.Spec)
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec:       appsv1.DeploymentSpec{Replicas: new(int32(replicas)), Selector: &metav1.LabelSelector{MatchLabels: sel}, Template: tmpl},
	}
	deps := client.AppsV1().Deployments(namespace)
	if _, err := deps.Create(context.Background(), dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deleteAtCleanup(t, "deployment", name, sel, deps.Delete)
	waitDeployment(t, name, int32(replicas))
	return name, sel, func() {
		t.Helper()
		if _, err := deps.Patch(context.Background(), name, types.MergePatchType, []byte(`{"spec":{"replicas":0}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		waitNoPods(t, sel)
	}
}

// TestDeployment: a Deployment of 3 VM pods becomes Available; a rolling
// update (an annotation of the template changed) replaces the VMs one by
// one, the Deployment never below replicas - maxUnavailable available; a
// scale to 0 leaves nothing of a VM on the node. On both kinds of node.
func TestDeployment(t *testing.T) {
	checkLeaks(t)
	for _, d := range frontDoors(t) {
		t.Run(d.name, func(t *testing.T) {
			name := uniqueName("deploy")
			sel := map[string]string{"app": name}
			tmpl := vmTemplate(sel)
			d.place(&tmpl.Spec)
			one := intstr.FromInt32(1)
			zero := intstr.FromInt32(0)
			dep := &appsv1.Deployment{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
				Spec: appsv1.DeploymentSpec{
					Replicas: new(int32(3)),
					Selector: &metav1.LabelSelector{MatchLabels: sel},
					Template: tmpl,
					Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
						RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: &one, MaxSurge: &zero}},
				},
			}
			deps := client.AppsV1().Deployments(namespace)
			start := time.Now()
			if _, err := deps.Create(context.Background(), dep, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			deleteAtCleanup(t, "deployment", name, sel, deps.Delete)
			waitDeployment(t, name, 3)
			t.Logf("Deployment of 3 VM pods Available in %v", time.Since(start).Round(100*time.Millisecond))
			old := podNames(podsOf(t, sel))

			// The rolling update, watched: every status the controller
			// writes is seen.
			low := watchAvailable(t, name)
			start = time.Now()
			patch := `{"spec":{"template":{"metadata":{"annotations":{"e2e.vmpod.io/revision":"2"}}}}}`
			if _, err := deps.Patch(context.Background(), name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
			waitDeployment(t, name, 3)
			took := time.Since(start)
			if min := low(); min < 2 {
				t.Errorf("during the rolling update the Deployment had %d available, below replicas - maxUnavailable = 2", min)
			}
			now := podsOf(t, sel)
			for _, p := range now {
				if old[p.Name] {
					t.Errorf("pod %s of the old revision is still there after the rolling update", p.Name)
				}
				if p.Spec.NodeName != d.node.name && d.node.name != "" {
					t.Errorf("pod %s on node %s, want %s", p.Name, p.Spec.NodeName, d.node.name)
				}
			}
			t.Logf("rolling update of 3 VM pods (maxUnavailable 1, maxSurge 0) in %v", took.Round(100*time.Millisecond))

			start = time.Now()
			if _, err := deps.Patch(context.Background(), name, types.MergePatchType, []byte(`{"spec":{"replicas":0}}`), metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
			waitNoPods(t, sel)
			t.Logf("scale to 0: pods gone in %v", time.Since(start).Round(100*time.Millisecond))
		})
	}
}

func podNames(pods []corev1.Pod) map[string]bool {
	m := map[string]bool{}
	for _, p := range pods {
		m[p.Name] = true
	}
	return m
}

// waitDeployment waits until the Deployment's latest revision is rolled
// out: replicas updated, all available, no old pod left.
func waitDeployment(t *testing.T, name string, replicas int32) {
	t.Helper()
	var d *appsv1.Deployment
	if !poll(2*bootTimeout, func() bool {
		var err error
		if d, err = client.AppsV1().Deployments(namespace).Get(context.Background(), name, metav1.GetOptions{}); err != nil {
			return false
		}
		s := d.Status
		return s.ObservedGeneration >= d.Generation && s.UpdatedReplicas == replicas && s.AvailableReplicas == replicas && s.Replicas == replicas
	}) {
		t.Fatalf("deployment %s not rolled out with %d available within %v: %+v", name, replicas, 2*bootTimeout, d.Status)
	}
}

// watchAvailable watches the Deployment's status; the returned function
// stops the watch and returns the least availableReplicas seen.
func watchAvailable(t *testing.T, name string) func() int32 {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := client.AppsV1().Deployments(namespace).Watch(ctx, metav1.SingleObject(metav1.ObjectMeta{Name: name}))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	low := make(chan int32, 1)
	go func() {
		min := int32(1 << 30)
		for ev := range w.ResultChan() {
			if d, ok := ev.Object.(*appsv1.Deployment); ok && d.Status.AvailableReplicas < min {
				min = d.Status.AvailableReplicas
			}
		}
		low <- min
	}()
	return func() int32 {
		cancel()
		w.Stop()
		return <-low
	}
}

// runJob runs a Job of one VM pod on the door's node, the test guest
// booted with the kernel command line, and waits (bounded) until the Job
// has the condition want (Complete or Failed); it returns the Job, its
// pods and how long that took.
func runJob(t *testing.T, d frontDoor, cmdline string, backoffLimit int32, want batchv1.JobConditionType) (*batchv1.Job, []corev1.Pod, time.Duration) {
	t.Helper()
	name := uniqueName("job")
	sel := map[string]string{"job-name": name}
	tmpl := vmTemplate(nil)
	tmpl.Spec.RestartPolicy = corev1.RestartPolicyNever
	tmpl.Spec.Containers[0].ReadinessProbe = nil
	tmpl.Spec.Containers[0].TerminationMessagePolicy = corev1.TerminationMessageFallbackToLogsOnError
	tmpl.Annotations = map[string]string{"vmpod.io/kernel-cmdline": cmdline}
	d.place(&tmpl.Spec)
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec:       batchv1.JobSpec{BackoffLimit: &backoffLimit, Template: tmpl},
	}
	jobs := client.BatchV1().Jobs(namespace)
	start := time.Now()
	if _, err := jobs.Create(context.Background(), job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deleteAtCleanup(t, "job", name, sel, jobs.Delete)
	limit := time.Duration(backoffLimit+1) * bootTimeout
	var j *batchv1.Job
	if !poll(limit, func() bool {
		j, _ = jobs.Get(context.Background(), name, metav1.GetOptions{})
		return j != nil && (hasCondition(j, batchv1.JobComplete) || hasCondition(j, batchv1.JobFailed))
	}) || !hasCondition(j, want) {
		t.Fatalf("job %s not %s within %v: %+v", name, want, limit, j.Status)
	}
	return j, podsOf(t, sel), time.Since(start)
}

// TestJob: a Job whose guest does its work and powers off completes (the
// test guest's /init replaced by its poweroff script: the guest's exit 0
// is the container's). On both kinds of node.
func TestJob(t *testing.T) {
	checkLeaks(t)
	for _, d := range frontDoors(t) {
		t.Run(d.name, func(t *testing.T) {
			_, pods, took := runJob(t, d, "rdinit=/bin/guest-poweroff", 0, batchv1.JobComplete)
			t.Logf("Job of one VM pod Complete in %v", took.Round(100*time.Millisecond))
			if len(pods) != 1 {
				t.Fatalf("the job has %d pods, want 1", len(pods))
			}
			p := pods[0]
			if term := p.Status.ContainerStatuses[0].State.Terminated; term == nil || term.ExitCode != 0 {
				t.Errorf("the job's VM ended %+v, want exit code 0", p.Status.ContainerStatuses[0].State)
			}
			if out := logs(p.Name); !strings.Contains(out, "VMPOD-GUEST: poweroff") {
				t.Errorf("no poweroff in the job's serial console:\n%s", out)
			}
		})
	}
}

// TestJobGuestPanic: a Job whose guest panics fails: each pod ends with
// exit code 2 and its status names the panic (the CRI node's reason is
// GuestPanicked; through containerd, which passes on only the exit code,
// the console's last line says it, and FallbackToLogsOnError makes that
// the termination message), the console up to the panic is the pod's log,
// and backoffLimit 1 gives exactly two pods. On both kinds of node.
func TestJobGuestPanic(t *testing.T) {
	checkLeaks(t)
	for _, d := range frontDoors(t) {
		t.Run(d.name, func(t *testing.T) {
			j, pods, took := runJob(t, d, "vmpod.test=panic", 1, batchv1.JobFailed)
			t.Logf("Job of a panicking VM Failed (backoffLimit 1) in %v", took.Round(100*time.Millisecond))
			if len(pods) != 2 || j.Status.Failed != 2 {
				t.Errorf("job %s: %d pods, %d failed; want 2 and 2 (backoffLimit 1)", j.Name, len(pods), j.Status.Failed)
			}
			for _, p := range pods {
				term := p.Status.ContainerStatuses[0].State.Terminated
				if term == nil || term.ExitCode != 2 {
					t.Errorf("pod %s ended %+v, want exit code 2 (GuestPanicked)", p.Name, p.Status.ContainerStatuses[0].State)
					continue
				}
				if !strings.Contains(term.Reason+" "+term.Message, "GuestPanicked") {
					t.Errorf("pod %s: reason %q, message %q: neither names the panic", p.Name, term.Reason, term.Message)
				}
				if out := logs(p.Name); !strings.Contains(out, "Kernel panic") {
					t.Errorf("pod %s: no kernel panic in its log:\n%s", p.Name, out)
				}
			}
		})
	}
}

func hasCondition(j *batchv1.Job, c batchv1.JobConditionType) bool {
	for _, x := range j.Status.Conditions {
		if x.Type == c && x.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// guestExec runs a command in the guest of a pod (kubectl exec, through
// the guest agent) and returns its output; it fails the test on a
// non-zero exit.
func guestExec(t *testing.T, pod string, cmd ...string) string {
	t.Helper()
	out, errOut, code := kubectl(t, time.Minute, append([]string{"exec", pod, "--"}, cmd...)...)
	if code != 0 {
		t.Fatalf("kubectl exec %s -- %q: exit %d: %s%s", pod, cmd, code, out, errOut)
	}
	return out
}

// guestHTTP asks addr (host:port) for the test guest's page from inside a
// guest, with busybox nc: the page names the answering guest's hostname
// (its pod name).
func guestHTTP(t *testing.T, pod, host, port string) string {
	t.Helper()
	return guestExec(t, pod, "sh", "-c", `printf 'GET / HTTP/1.0\r\n\r\n' | timeout 10 nc "$0" "$1"`, host, port)
}

// TestStatefulSet: a StatefulSet of 2 VM pods under a headless Service
// gets the stable names web-0 and web-1, each its own DNS name, which a
// guest resolves; a deleted member comes back under its name.
func TestStatefulSet(t *testing.T) {
	checkLeaks(t)
	name := uniqueName("sts")
	sel := map[string]string{"app": name}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: sel,
			Ports: []corev1.ServicePort{{Name: "http", Port: 8080}}},
	}
	svcs := client.CoreV1().Services(namespace)
	if _, err := svcs.Create(context.Background(), svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deleteAtCleanup(t, "service", name, nil, svcs.Delete)
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: appsv1.StatefulSetSpec{
			Replicas: new(int32(2)), ServiceName: name,
			Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: vmTemplate(sel),
			// Both at once: ordered start would wait for web-0's boot.
			PodManagementPolicy: appsv1.ParallelPodManagement,
		},
	}
	set := client.AppsV1().StatefulSets(namespace)
	start := time.Now()
	if _, err := set.Create(context.Background(), sts, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deleteAtCleanup(t, "statefulset", name, sel, set.Delete)
	waitStatefulSet(t, name, 2)
	t.Logf("StatefulSet of 2 VM pods Ready in %v", time.Since(start).Round(100*time.Millisecond))
	for _, i := range []string{"0", "1"} {
		p := getPod(t, name+"-"+i)
		waitLog(t, p.Name, "VMPOD-GUEST: qemu-ga ready")
		// The member's own DNS name, from the other member's guest.
		other := name + "-" + map[string]string{"0": "1", "1": "0"}[i]
		fqdn := fmt.Sprintf("%s.%s.%s.svc.cluster.local", p.Name, name, namespace)
		if out := guestExec(t, other, "nslookup", fqdn); !strings.Contains(out, p.Status.PodIP) {
			t.Errorf("nslookup %s in %s: no %s:\n%s", fqdn, other, p.Status.PodIP, out)
		}
		if out := guestHTTP(t, other, p.Status.PodIP, "8080"); !strings.Contains(out, "vmpod-guest "+p.Name) {
			t.Errorf("HTTP from %s to %s (%s): want its hostname %s:\n%s", other, fqdn, p.Status.PodIP, p.Name, out)
		}
	}
	// A member deleted comes back under its name: a new pod (UID) with
	// the same name, DNS name and ordinal.
	member := name + "-1"
	old := getPod(t, member).UID
	if err := client.CoreV1().Pods(namespace).Delete(context.Background(), member, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if !poll(deleteTimeout, func() bool {
		p, err := client.CoreV1().Pods(namespace).Get(context.Background(), member, metav1.GetOptions{})
		return err == nil && p.UID != old
	}) {
		t.Fatalf("%s: no new pod under its name within %v of its deletion", member, deleteTimeout)
	}
	waitStatefulSet(t, name, 2)
	p := getPod(t, member)
	waitLog(t, member, "VMPOD-GUEST: qemu-ga ready")
	fqdn := fmt.Sprintf("%s.%s.%s.svc.cluster.local", member, name, namespace)
	if !poll(time.Minute, func() bool {
		return strings.Contains(guestExec(t, name+"-0", "nslookup", fqdn), p.Status.PodIP)
	}) {
		t.Errorf("%s does not resolve to the new pod's IP %s", fqdn, p.Status.PodIP)
	}
}

func waitStatefulSet(t *testing.T, name string, replicas int32) {
	t.Helper()
	var s *appsv1.StatefulSet
	if !poll(2*bootTimeout, func() bool {
		var err error
		s, err = client.AppsV1().StatefulSets(namespace).Get(context.Background(), name, metav1.GetOptions{})
		return err == nil && s.Status.ObservedGeneration >= s.Generation && s.Status.ReadyReplicas == replicas && s.Status.AvailableReplicas == replicas
	}) {
		t.Fatalf("statefulset %s: not %d ready within %v: %+v", name, replicas, 2*bootTimeout, s.Status)
	}
}
