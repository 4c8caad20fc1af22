//go:build e2e

package e2e

import (
	"context"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
)

// vmOnlyTaint is the taint of hack/local-up.sh's VM-only node
// (docs/install.md, "A VM-only node").
const vmOnlyTaint = "vmpod.io/vm-only"

// TestCRINode runs the test guest on the VM-only node, whose kubelet talks
// to vm-runtime cri with no containerd (hack/local-up.sh's second node): the
// scheduler places it there (a node selector and the node's taint
// tolerated), it runs, its serial console is kubectl logs, its pod IP
// serves HTTP, kubectl exec runs in the guest, and a delete powers the
// guest off by ACPI with a clean exit and leaves nothing on the node.
func TestCRINode(t *testing.T) {
	before := checkLeaks(t)[criNode]
	if criNode == nil {
		t.Fatal("the cluster has no VM-only node (VMPOD_E2E_CRI_NODE is unset): the e2e suite needs the one hack/local-up.sh makes, which VMPOD_LOCAL_CRI_NODE=0 leaves out")
	}
	const grace = 60
	b := makePod("cri").grace(grace)
	b.pod.Spec.NodeSelector = map[string]string{corev1.LabelHostname: criNode.name}
	b.pod.Spec.Tolerations = []corev1.Toleration{{Key: vmOnlyTaint, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	pod := create(t, b.obj())
	p := waitRunning(t, pod.Name)
	if p.Spec.NodeName != criNode.name {
		t.Fatalf("pod on node %q, want the VM-only node %q", p.Spec.NodeName, criNode.name)
	}
	log := waitLog(t, pod.Name, "VMPOD-GUEST: ready")

	// The check that nothing is left afterwards must see what the VM
	// holds while it runs.
	running, _, err := criNode.leftovers()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"qemu=1", "netns=1", "taps=1", "kubelet-poddirs=1", "statedirs=1"} {
		if !strings.Contains(" "+running+" ", " "+want+" ") {
			t.Errorf("the VM-only node with the pod running has %q, want %s", running, want)
		}
	}
	if noMore(running, before) {
		t.Errorf("the VM-only node with the pod running has %q, no more than before it (%q)", running, before)
	}

	t.Run("logs are the serial console", func(t *testing.T) {
		for _, want := range []string{"VMPOD-GUEST: init", "VMPOD-GUEST: ip " + p.Status.PodIP + "/", "VMPOD-GUEST: http ready"} {
			if !strings.Contains(log, want) {
				t.Errorf("no %q in kubectl logs:\n%s", want, log)
			}
		}
	})

	t.Run("the pod IP serves the guest", func(t *testing.T) {
		if out := criNode.httpGet(t, p.Status.PodIP); !strings.Contains(out, "200 OK") {
			t.Errorf("HTTP answer from %s:\n%s", p.Status.PodIP, out)
		}
	})

	t.Run("kubectl exec runs in the guest", func(t *testing.T) {
		waitLog(t, pod.Name, "VMPOD-GUEST: qemu-ga ready")
		if out, errOut, code := kubectl(t, time.Minute, "exec", pod.Name, "--", "echo", "hello"); out != "hello\n" || code != 0 {
			t.Errorf("kubectl exec -- echo hello: %q, exit %d, stderr %q; want \"hello\\n\", 0", out, code, errOut)
		}
		if _, errOut, code := kubectl(t, time.Minute, "exec", pod.Name, "--", "sh", "-c", "echo oops >&2; exit 3"); code != 3 || !strings.Contains(errOut, "oops") {
			t.Errorf("kubectl exec -- exit 3: exit %d, stderr %q; want 3 and oops", code, errOut)
		}
	})

	t.Run("vm-runtime's metrics show the VM", func(t *testing.T) {
		if criNode.metricsURL == "" {
			t.Fatal("VMPOD_E2E_CRI_METRICS_URL is unset: hack/local-up.sh runs vm-runtime cri with --metrics-address and sets it")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out, err := criNode.run(ctx, `curl -sSf "$1"`, criNode.metricsURL)
		if err != nil {
			t.Fatal(err)
		}
		info := regexp.MustCompile(`(?m)^vmpod_vm_info\{[^}]*pod="` + regexp.QuoteMeta(pod.Name) + `"[^}]*state="running"[^}]*\} 1$`)
		usage := regexp.MustCompile(`(?m)^vmpod_vm_memory_usage_bytes\{namespace="` + regexp.QuoteMeta(namespace) + `",pod="` + regexp.QuoteMeta(pod.Name) + `"\} [1-9]`)
		phase := regexp.MustCompile(`(?m)^vmpod_vm_start_phase_seconds_count\{phase="qemu"\} [1-9]`)
		ran := regexp.MustCompile(`(?m)^vmpod_exec_duration_seconds_count\{result="ran"\} [1-9]`)
		for name, re := range map[string]*regexp.Regexp{"the VM's info": info, "its memory": usage, "a start's qemu phase": phase, "the execs that ran": ran} {
			if !re.MatchString(out) {
				t.Errorf("no series for %s (%s) at %s:\n%s", name, re, criNode.metricsURL, out)
			}
		}
	})

	t.Run("delete shuts the guest down by ACPI", func(t *testing.T) {
		exit := watchExit(t, pod.Name)
		rest := followLog(t, pod.Name)
		took := deletePod(t, pod.Name)
		out := rest()
		if !strings.Contains(out, "VMPOD-GUEST: poweroff") {
			t.Errorf("no ACPI poweroff on the serial console after delete:\n%s", out)
		}
		if term := exit(); term == nil || term.ExitCode != 0 {
			t.Errorf("the container ended %+v, want exit 0 (the guest powered off)", term)
		}
		if took > (grace-10)*time.Second {
			t.Errorf("delete took %v of a %ds grace period: not an ACPI shutdown", took, grace)
		}
		t.Logf("kubectl delete -> pod gone: %v", took.Round(100*time.Millisecond))
	})

	t.Logf("the VM-only node: before %s; with the pod %s", before, running)
}

// watchExit watches the pod until it is deleted; the returned function
// stops the watch and returns the last terminated state of its container
// that the kubelet reported, nil if none.
func watchExit(t *testing.T, name string) func() *corev1.ContainerStateTerminated {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := client.CoreV1().Pods(namespace).Watch(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String(),
	})
	if err != nil {
		cancel()
		t.Fatalf("watch pod %s: %v", name, err)
	}
	var mu sync.Mutex
	var last *corev1.ContainerStateTerminated
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			for _, cs := range p.Status.ContainerStatuses {
				if cs.State.Terminated != nil {
					mu.Lock()
					last = cs.State.Terminated
					mu.Unlock()
				}
			}
		}
	}()
	return func() *corev1.ContainerStateTerminated {
		cancel()
		w.Stop()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return last
	}
}
