//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
)

// Bounds on what a VM under TCG on a busy 2-core machine takes.
const (
	bootTimeout   = 4 * time.Minute
	deleteTimeout = 2 * time.Minute
)

// podBuilder builds a VM pod of the test guest.
type podBuilder struct{ pod *corev1.Pod }

func makePod(prefix string) *podBuilder {
	suffix := make([]byte, 3)
	rand.Read(suffix)
	return &podBuilder{pod: &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: prefix + "-" + hex.EncodeToString(suffix), Namespace: namespace},
		Spec: corev1.PodSpec{
			RuntimeClassName: new("vmpod"),
			RestartPolicy:    corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name:            "vm",
				Image:           image,
				ImagePullPolicy: corev1.PullIfNotPresent,
				Resources: corev1.ResourceRequirements{
					// A small CPU request (the RuntimeClass adds 100m) so
					// that five VMs fit on a 2-core node beside the demo
					// pod, with room for the kubelet's admission to lag a
					// deletion; the limit is the vCPU count.
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m")},
					Limits: corev1.ResourceList{
						corev1.ResourceCPU:    resource.MustParse("1"),
						corev1.ResourceMemory: resource.MustParse("256Mi"),
					},
				},
			}},
		},
	}}
}

func (b *podBuilder) limits(cpu, memory string) *podBuilder {
	l := b.pod.Spec.Containers[0].Resources.Limits
	l[corev1.ResourceCPU], l[corev1.ResourceMemory] = resource.MustParse(cpu), resource.MustParse(memory)
	return b
}

func (b *podBuilder) annotation(k, v string) *podBuilder {
	if b.pod.Annotations == nil {
		b.pod.Annotations = map[string]string{}
	}
	b.pod.Annotations[k] = v
	return b
}

func (b *podBuilder) restart(p corev1.RestartPolicy) *podBuilder {
	b.pod.Spec.RestartPolicy = p
	return b
}

func (b *podBuilder) grace(seconds int64) *podBuilder {
	b.pod.Spec.TerminationGracePeriodSeconds = &seconds
	return b
}

// readinessExec makes the pod Ready when cmd succeeds in the guest.
func (b *podBuilder) readinessExec(cmd ...string) *podBuilder {
	b.pod.Spec.Containers[0].ReadinessProbe = &corev1.Probe{
		ProbeHandler:   corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: cmd}},
		PeriodSeconds:  2,
		TimeoutSeconds: 10,
	}
	return b
}

// onNodeNamed bypasses the scheduler.
func (b *podBuilder) onNodeNamed(node string) *podBuilder {
	b.pod.Spec.NodeName = node
	return b
}

func (b *podBuilder) obj() *corev1.Pod { return b.pod }

// create creates the pod and deletes it at cleanup, waiting (bounded) until
// it is gone so that the next test and the leftover check start clean.
func create(t *testing.T, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	got, err := client.CoreV1().Pods(namespace).Create(context.Background(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s: %v", pod.Name, err)
	}
	t.Cleanup(func() { deletePod(t, pod.Name) })
	return got
}

// deletePod deletes a pod and waits until it is gone; it returns how long
// that took.
func deletePod(t *testing.T, name string) time.Duration {
	t.Helper()
	start := time.Now()
	err := client.CoreV1().Pods(namespace).Delete(context.Background(), name, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return 0
	}
	if err != nil {
		t.Errorf("delete pod %s: %v", name, err)
		return 0
	}
	if !poll(deleteTimeout, func() bool {
		_, err := client.CoreV1().Pods(namespace).Get(context.Background(), name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}) {
		t.Errorf("pod %s still there %v after delete", name, deleteTimeout)
	}
	return time.Since(start)
}

// poll calls cond every 250ms until it holds or timeout passes.
func poll(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func getPod(t *testing.T, name string) *corev1.Pod {
	t.Helper()
	p, err := client.CoreV1().Pods(namespace).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get pod %s: %v", name, err)
	}
	return p
}

// waitRunning waits until the pod is Running and returns it.
func waitRunning(t *testing.T, name string) *corev1.Pod {
	t.Helper()
	var p *corev1.Pod
	if !poll(bootTimeout, func() bool {
		p = getPod(t, name)
		return p.Status.Phase == corev1.PodRunning || p.Status.Phase == corev1.PodFailed
	}) || p.Status.Phase != corev1.PodRunning {
		t.Fatalf("pod %s not Running within %v: phase %s\n%s", name, bootTimeout, p.Status.Phase, describe(name))
	}
	return p
}

// logs returns the pod's container log (the VM's serial console); "" if
// there is none yet.
func logs(name string) string {
	b, err := client.CoreV1().Pods(namespace).GetLogs(name, &corev1.PodLogOptions{}).Do(context.Background()).Raw()
	if err != nil {
		return ""
	}
	return string(b)
}

// waitLog waits until the pod's log has marker and returns the log.
func waitLog(t *testing.T, name, marker string) string {
	t.Helper()
	var out string
	if !poll(bootTimeout, func() bool {
		out = logs(name)
		return strings.Contains(out, marker)
	}) {
		t.Fatalf("no %q in the logs of %s within %v:\n%s\n%s", marker, name, bootTimeout, out, describe(name))
	}
	return out
}

// followLog streams the pod's log until the container ends; the returned
// function waits (bounded) for the stream to end and returns what came.
func followLog(t *testing.T, name string) func() string {
	t.Helper()
	stream, err := client.CoreV1().Pods(namespace).GetLogs(name, &corev1.PodLogOptions{Follow: true}).Stream(context.Background())
	if err != nil {
		t.Fatalf("follow logs of %s: %v", name, err)
	}
	var mu sync.Mutex
	var b strings.Builder
	done := make(chan struct{})
	go func() {
		defer close(done)
		s := bufio.NewScanner(stream)
		for s.Scan() {
			mu.Lock()
			b.WriteString(s.Text() + "\n")
			mu.Unlock()
		}
	}()
	return func() string {
		select {
		case <-done:
		case <-time.After(deleteTimeout):
		}
		stream.Close()
		mu.Lock()
		defer mu.Unlock()
		return b.String()
	}
}

// events returns the messages of the pod's events, "reason: message".
func events(name string) []string {
	l, err := client.CoreV1().Events(namespace).List(context.Background(), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.name", name).String(),
	})
	if err != nil {
		return []string{err.Error()}
	}
	var out []string
	for _, e := range l.Items {
		out = append(out, e.Reason+": "+e.Message)
	}
	return out
}

// waitEvent waits for an event of the pod whose "reason: message" has all
// of parts, and returns it.
func waitEvent(t *testing.T, name string, timeout time.Duration, parts ...string) string {
	t.Helper()
	var found string
	if !poll(timeout, func() bool {
		for _, e := range events(name) {
			ok := true
			for _, p := range parts {
				ok = ok && strings.Contains(e, p)
			}
			if ok {
				found = e
				return true
			}
		}
		return false
	}) {
		t.Fatalf("no event of %s with %q within %v; events:\n%s", name, parts, timeout, strings.Join(events(name), "\n"))
	}
	return found
}

func describe(name string) string {
	p, err := client.CoreV1().Pods(namespace).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("status: %+v\nevents:\n%s", p.Status.ContainerStatuses, strings.Join(events(name), "\n"))
}

// httpGet asks the guest's HTTP server at the pod IP, from the node.
func (n *testNode) httpGet(t *testing.T, ip string) string {
	t.Helper()
	var out string
	var err error
	for range 10 { // the guest's HTTP server may lag its ready marker
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		out, err = n.run(ctx, `exec 3<>"/dev/tcp/$1/8080" && printf 'GET / HTTP/1.0\r\n\r\n' >&3 && timeout 5 cat <&3`, ip)
		cancel()
		if strings.Contains(out, "vmpod-guest") {
			return out
		}
		time.Sleep(time.Second)
	}
	t.Fatalf("no HTTP answer from the guest at %s:8080: %v\n%s", ip, err, out)
	return ""
}

// kubectl runs kubectl ($VMPOD_E2E_KUBECTL, else the one in PATH) against
// the cluster with a bound on its time, and returns its stdout, stderr and
// exit code.
func kubectl(t *testing.T, timeout time.Duration, args ...string) (string, string, int) {
	t.Helper()
	stdout, stderr, code, err := kubectlNoFatal(timeout, args...)
	if err != nil {
		t.Fatal(err)
	}
	return stdout, stderr, code
}

// kubectlNoFatal is kubectl for a goroutine of a test: an error where
// kubectl's exit code should be.
func kubectlNoFatal(timeout time.Duration, args ...string) (string, string, int, error) {
	bin := os.Getenv("VMPOD_E2E_KUBECTL")
	if bin == "" {
		bin = "kubectl"
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"--namespace", namespace}, args...)...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		return stdout.String(), stderr.String(), -1, fmt.Errorf("kubectl %v did not end within %v: %s%s", args, timeout, stdout.String(), stderr.String())
	}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return stdout.String(), stderr.String(), exit.ExitCode(), nil
	case err != nil:
		return stdout.String(), stderr.String(), -1, fmt.Errorf("kubectl %v: %v", args, err)
	}
	return stdout.String(), stderr.String(), 0, nil
}

// waitReady waits until the pod's Ready condition is true.
func waitReady(t *testing.T, name string) {
	t.Helper()
	if !poll(bootTimeout, func() bool {
		for _, c := range getPod(t, name).Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				return true
			}
		}
		return false
	}) {
		t.Fatalf("%s not Ready within %v:\n%s", name, bootTimeout, describe(name))
	}
}

// kubectlTTY runs kubectl on a pseudo-terminal (script(1), util-linux) and
// returns what it printed there and its exit code.
func kubectlTTY(t *testing.T, timeout time.Duration, args ...string) (string, int) {
	t.Helper()
	bin := os.Getenv("VMPOD_E2E_KUBECTL")
	if bin == "" {
		bin = "kubectl"
	}
	line := []string{bin, "--namespace", namespace}
	for _, a := range args {
		line = append(line, "'"+strings.ReplaceAll(a, "'", `'\''`)+"'")
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "script", "-qec", strings.Join(line, " "), "/dev/null")
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("kubectl %v on a terminal did not end within %v: %s", args, timeout, out)
	}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return string(out), exit.ExitCode()
	case err != nil:
		t.Fatalf("script kubectl %v: %v", args, err)
	}
	return string(out), 0
}
