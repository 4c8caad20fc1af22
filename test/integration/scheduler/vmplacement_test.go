package scheduler

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	clientset "k8s.io/client-go/kubernetes"

	"github.com/vmpod/vmpod/internal/testenv/controlplane"
	"github.com/vmpod/vmpod/pkg/scheduler/vmplacement"
	"github.com/vmpod/vmpod/pkg/vmspec"
	"github.com/vmpod/vmpod/pkg/vmspec/vmspectest"
)

const (
	namespace = "vmplacement"
	// podFixed is the RuntimeClass's overhead.podFixed memory, which
	// RuntimeClass admission copies into each VM pod's spec.overhead.
	podFixed = 16 << 20
	// waitTimeout bounds every wait for the scheduler; it is not an
	// assertion about speed.
	waitTimeout = 60 * time.Second
)

// vmpodProfile enables VMPlacement at every extension point it implements,
// next to the default plugins, with its args as a cluster admin writes them.
// The in-tree ImageLocality score is off so that the locality binding below
// is VMPlacement's doing alone.
const vmpodProfile = `profiles:
- schedulerName: default-scheduler
  plugins:
    multiPoint:
      enabled:
      - name: VMPlacement
    score:
      disabled:
      - name: ImageLocality
  pluginConfig:
  - name: VMPlacement
    args:
      runtimeClassNames: [vmpod]
      strategy: spread
      imageLocalityWeight: 1
      strategyWeight: 1
`

func TestVMPlacement(t *testing.T) {
	cp := controlplane.Start(t, controlplane.Options{})
	ctx := t.Context()
	createCluster(t, cp.Client)
	startScheduler(t, cp, vmpodProfile)

	// A VM that fits kvm-tight by its requests (NodeResourcesFit) but not
	// once its overhead is counted.
	tightGuest := 2<<30 - podFixed
	if oh := vmspec.OverheadFor(true).Bytes(uint64(tightGuest), 1); oh <= podFixed {
		t.Fatalf("test setup: the KVM overhead of a %d MiB VM is %d MiB, not above podFixed", tightGuest>>20, oh>>20)
	}

	t.Run("bindings", func(t *testing.T) {
		// Created and bound one at a time, so that each placement sees
		// the ones before it.
		for _, tc := range []struct {
			pod      *v1.Pod
			wantNode string
		}{
			// Two identical TCG-only nodes; one has the disk image.
			{withNodeSelector(vmPod("locality").Memory("1Gi").Obj(), "pool", "tcg"), "tcg-cached"},
			// KVM and a named CPU model only kvm-skylake has.
			{vmPod("skylake").Memory("2Gi").Annotation(vmspec.AnnotationAccel, "kvm").
				Annotation(vmspec.AnnotationCPUModel, "Skylake-Client").Obj(), "kvm-skylake"},
			// UEFI: only kvm-epyc has OVMF.
			{vmPod("uefi").Memory("1Gi").Annotation(vmspec.AnnotationFirmware, "uefi").Obj(), "kvm-epyc"},
			// 10 GiB of guest RAM: only kvm-epyc has the memory left.
			{vmPod("big").CPU("4").Memory("10Gi").Obj(), "kvm-epyc"},
			// Features only kvm-epyc has.
			{vmPod("sha").Memory("512Mi").Annotation(vmspec.AnnotationCPUFeatures, "sha-ni").Obj(), "kvm-epyc"},
		} {
			createPod(t, cp.Client, tc.pod)
			if got := waitBound(t, cp.Client, tc.pod.Name); got != tc.wantNode {
				t.Errorf("pod %s bound to %s, want %s", tc.pod.Name, got, tc.wantNode)
			}
		}
	})

	t.Run("fits nowhere", func(t *testing.T) {
		for _, tc := range []struct {
			pod         *v1.Pod
			wantReasons []string
		}{
			{
				// The flagship reason: a KVM VM on the TCG-only pool.
				pod:         withNodeSelector(vmPod("kvm-on-tcg").Memory("1Gi").Annotation(vmspec.AnnotationAccel, "kvm").Obj(), "pool", "tcg"),
				wantReasons: []string{"2 " + vmplacement.ErrReasonNoKVM},
			},
			{
				// Fits kvm-tight by requests and pod overhead, as
				// NodeResourcesFit counts; the VM's real overhead does
				// not fit. The other nodes lack the model or vmpod.
				pod: vmPod("tight").MemoryBytes(tightGuest).
					Annotation(vmspec.AnnotationCPUModel, "Cascadelake-Server").Obj(),
				wantReasons: []string{
					"1 " + vmplacement.ErrReasonMemory,
					"4 " + vmplacement.ErrReasonCPUModelPrefix + "Cascadelake-Server",
					"1 " + vmplacement.ErrReasonNoRuntime,
				},
			},
		} {
			createPod(t, cp.Client, tc.pod)
			msg := waitFailedScheduling(t, cp.Client, tc.pod.Name)
			t.Logf("pod %s: FailedScheduling: %s", tc.pod.Name, msg)
			for _, want := range tc.wantReasons {
				if !strings.Contains(msg, want) {
					t.Errorf("pod %s: FailedScheduling event %q does not say %q", tc.pod.Name, msg, want)
				}
			}
			pod, err := cp.Client.CoreV1().Pods(namespace).Get(ctx, tc.pod.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if pod.Spec.NodeName != "" || pod.Status.Phase != v1.PodPending {
				t.Errorf("pod %s: node %q, phase %s; want unbound and Pending", tc.pod.Name, pod.Spec.NodeName, pod.Status.Phase)
			}
		}
	})

	t.Run("other pods unaffected", func(t *testing.T) {
		// VMPlacement would refuse no-vmpod for a VM pod; a plain pod
		// and a pod of another RuntimeClass land there.
		plain := withNodeSelector(plainPod("plain"), v1.LabelHostname, "no-vmpod")
		createPod(t, cp.Client, plain)
		if got := waitBound(t, cp.Client, plain.Name); got != "no-vmpod" {
			t.Errorf("pod %s bound to %s, want no-vmpod", plain.Name, got)
		}
		runc := withNodeSelector(plainPod("runc"), v1.LabelHostname, "no-vmpod")
		rc := "runc"
		runc.Spec.RuntimeClassName = &rc
		createPod(t, cp.Client, runc)
		if got := waitBound(t, cp.Client, runc.Name); got != "no-vmpod" {
			t.Errorf("pod %s bound to %s, want no-vmpod", runc.Name, got)
		}
	})
}

// createCluster creates the namespace, the RuntimeClasses and six nodes
// labelled as the labeller labels them.
func createCluster(t *testing.T, c clientset.Interface) {
	t.Helper()
	ctx := t.Context()
	createNamespace(t, c, v1.ResourceList{v1.ResourceMemory: *resource.NewQuantity(podFixed, resource.BinarySI)})
	runc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "runc"}, Handler: "runc"}
	if _, err := c.NodeV1().RuntimeClasses().Create(ctx, runc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []*v1.Node{
		vmNode("tcg-plain", "4Gi").Label("pool", "tcg").Obj(),
		vmNode("tcg-cached", "4Gi").Label("pool", "tcg").Image(vmspectest.Image, 1<<30).Obj(),
		vmNode("kvm-skylake", "8Gi").KVM().CPUModels("Skylake-Client").Features("avx2", "aes").Obj(),
		vmNode("kvm-epyc", "16Gi").KVM().CPUModels("EPYC").Features("avx2", "sha-ni").UEFI().Obj(),
		vmNode("kvm-tight", "2Gi").KVM().CPUModels("Cascadelake-Server").Obj(),
		node("no-vmpod", "64Gi").Obj(),
	} {
		if _, err := c.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// createNamespace creates the test namespace and the vmpod RuntimeClass,
// whose overhead.podFixed is podFixed.
func createNamespace(t testing.TB, c clientset.Interface, podFixed v1.ResourceList) {
	t.Helper()
	ctx := t.Context()
	if _, err := c.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rc := &nodev1.RuntimeClass{
		ObjectMeta: metav1.ObjectMeta{Name: "vmpod"},
		Handler:    "vmpod",
		Overhead:   &nodev1.Overhead{PodFixed: podFixed},
	}
	if _, err := c.NodeV1().RuntimeClasses().Create(ctx, rc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// vmPod is a VM pod in the test namespace, without the requests the API
// server defaults from its limits.
func vmPod(name string) *podWrapper {
	return &podWrapper{vmspectest.MakePod(name).Namespace(namespace)}
}

// podWrapper adds to vmspectest's builder what only this test needs.
type podWrapper struct{ *vmspectest.PodWrapper }

func (p *podWrapper) Memory(q string) *podWrapper { p.PodWrapper.Memory(q); return p }
func (p *podWrapper) CPU(q string) *podWrapper    { p.PodWrapper.CPU(q); return p }
func (p *podWrapper) Annotation(k, v string) *podWrapper {
	p.PodWrapper.Annotation(k, v)
	return p
}

func (p *podWrapper) MemoryBytes(b int) *podWrapper {
	p.Spec.Containers[0].Resources.Limits[v1.ResourceMemory] = *resource.NewQuantity(int64(b), resource.BinarySI)
	return p
}

func plainPod(name string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: v1.PodSpec{Containers: []v1.Container{{
			Name: "c", Image: "busybox",
			Resources: v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceMemory: resource.MustParse("1Gi")}},
		}}},
	}
}

func withNodeSelector(p *v1.Pod, k, v string) *v1.Pod {
	p.Spec.NodeSelector = map[string]string{k: v}
	return p
}

func createPod(t *testing.T, c clientset.Interface, p *v1.Pod) {
	t.Helper()
	if _, err := c.CoreV1().Pods(p.Namespace).Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s: %v", p.Name, err)
	}
}

// waitBound waits (bounded) until the scheduler binds the pod and returns
// its node.
func waitBound(t *testing.T, c clientset.Interface, name string) string {
	t.Helper()
	var node string
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		p, err := c.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		node = p.Spec.NodeName
		return node != "", nil
	})
	if err != nil {
		t.Fatalf("pod %s not bound: %v (%s)", name, err, schedulingMessage(t, c, name))
	}
	return node
}

// waitFailedScheduling waits (bounded) for the scheduler's FailedScheduling
// event about the pod and returns its message.
func waitFailedScheduling(t *testing.T, c clientset.Interface, name string) string {
	t.Helper()
	var msg string
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		events, err := c.EventsV1().Events(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, e := range events.Items {
			if e.Regarding.Kind == "Pod" && e.Regarding.Name == name && e.Reason == "FailedScheduling" {
				msg = e.Note
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no FailedScheduling event for pod %s: %v", name, err)
	}
	return msg
}

// schedulingMessage is the pod's PodScheduled condition, for failures.
func schedulingMessage(t *testing.T, c clientset.Interface, name string) string {
	p, err := c.CoreV1().Pods(namespace).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	for _, cond := range p.Status.Conditions {
		if cond.Type == v1.PodScheduled {
			return fmt.Sprintf("PodScheduled=%s: %s", cond.Status, cond.Message)
		}
	}
	return "no PodScheduled condition"
}
