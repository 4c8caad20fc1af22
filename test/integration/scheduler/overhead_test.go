package scheduler

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	clientset "k8s.io/client-go/kubernetes"
	resourcehelper "k8s.io/component-helpers/resource"
	"sigs.k8s.io/yaml"

	"github.com/vmpod/vmpod/internal/testenv/controlplane"
	"github.com/vmpod/vmpod/internal/testenv/repo"
)

// The numbers of TestOverheadCountedOnce, those of the local cluster where
// the double count was seen: the RuntimeClass overhead of
// manifests/runtimeclass.yaml (shippedOverhead; its CPU, 100m, is what
// smallNodeFits counts with), VM pods of 50m and 64Mi, a 2-CPU node.
const (
	smallVMCPU    = "50m"
	smallVMMemory = "64Mi"
	smallNodeCPU  = "2"
	// smallNodeFits is how many such pods the node holds, each counted at
	// requests plus overhead once: 2000m / (50m + 100m), rounded down.
	// Memory (13 x (64Mi + the overhead's) of 4Gi) does not limit it.
	smallNodeFits = 13
	// smallNodeRunning of them run already when the test's scheduler starts.
	smallNodeRunning = 5
)

// TestOverheadCountedOnce fills a 2-CPU node with small VM pods through the
// scheduler binary (cmd/scheduler-plugin, VMPlacement enabled) and checks
// that it counts each at its requests plus the RuntimeClass overhead, once:
// smallNodeFits pods fit and the next one is Pending with the scheduler's
// "Insufficient cpu".
//
// Some of the pods already run, with the status a v1.37 kubelet reports
// for them (runningStatus): that status is where kube-scheduler v1.37.2,
// left to its defaults, counted the overhead a second time and took 250m
// for each running pod (see cmd/scheduler-plugin's featureGates). No
// kubelet runs: the test writes the status.
func TestOverheadCountedOnce(t *testing.T) {
	cp := controlplane.Start(t, controlplane.Options{})
	ctx := t.Context()
	c := cp.Client
	overhead := shippedOverhead(t)
	if cpu := overhead[v1.ResourceCPU]; cpu.Cmp(resource.MustParse("100m")) != 0 {
		t.Fatalf("manifests/runtimeclass.yaml's overhead has cpu %s; smallNodeFits counts with 100m", cpu.String())
	}
	createNamespace(t, c, overhead)
	if _, err := c.CoreV1().Nodes().Create(ctx, vmNode("small", "4Gi").CPU(smallNodeCPU).Obj(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	for i := range smallNodeRunning {
		runPodOnNode(t, c, smallVM(fmt.Sprintf("running-%d", i)), "small")
	}
	runSchedulerBinary(t, cp, vmpodProfile)

	// All at once, as a Deployment scaling up would create them.
	var names []string
	for i := range smallNodeFits - smallNodeRunning + 1 {
		p := smallVM(fmt.Sprintf("new-%02d", i))
		createPod(t, c, p)
		names = append(names, p.Name)
	}
	var bound, pending []string
	for _, name := range names {
		node, msg := waitScheduled(t, c, name)
		if node != "" {
			bound = append(bound, name)
			continue
		}
		pending = append(pending, name)
		if !strings.Contains(msg, "1 Insufficient cpu") {
			t.Errorf("pod %s: PodScheduled message %q does not say 1 Insufficient cpu", name, msg)
		}
	}
	if got, want := smallNodeRunning+len(bound), smallNodeFits; got != want {
		t.Errorf("the node holds %d VM pods (%d running + %d bound, pending: %v), want %d: each at %s + %s CPU in %s",
			got, smallNodeRunning, len(bound), pending, want, smallVMCPU, overhead.Cpu().String(), smallNodeCPU)
	}
	if len(pending) != 1 {
		t.Errorf("pending pods %v, want exactly one", pending)
	}
}

// smallVM is a VM pod of 50m and 64Mi; the apiserver defaults its requests
// to those limits.
func smallVM(name string) *v1.Pod {
	return vmPod(name).CPU(smallVMCPU).Memory(smallVMMemory).Obj()
}

// runPodOnNode creates the pod bound to the node and gives it the status
// the node's kubelet reports for it once it runs. It checks that the
// pod-level status carries the overhead, as a kubelet's does: without it
// the test would not exercise what it is about.
func runPodOnNode(t *testing.T, c clientset.Interface, pod *v1.Pod, node string) {
	t.Helper()
	ctx := t.Context()
	pod.Spec.NodeName = node
	created, err := c.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s: %v", pod.Name, err)
	}
	created.Status = runningStatus(created)
	updated, err := c.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("pod %s status: %v", pod.Name, err)
	}
	want := resource.MustParse(smallVMCPU)
	want.Add(shippedOverhead(t)[v1.ResourceCPU])
	if got := updated.Status.AllocatedResources[v1.ResourceCPU]; got.Cmp(want) != 0 {
		t.Fatalf("test setup: pod %s status.allocatedResources.cpu is %s as stored, want %s (requests + overhead, as a kubelet reports it)",
			pod.Name, got.String(), want.String())
	}
}

// runningStatus is the status a v1.37 kubelet reports for a running VM pod
// (pkg/kubelet/kubelet_pods.go, generateAPIPodStatus): Running, the
// container running with its requests as allocated and actual resources,
// and, with the kubelet's InPlacePodLevelResourcesVerticalScaling gate (on
// by default), the pod-level allocatedResources and resources. The kubelet
// sums those with the same helpers as here, which include spec.overhead,
// and for CPU reads the pod cgroup, which holds the overhead too.
func runningStatus(pod *v1.Pod) v1.PodStatus {
	st := pod.Status
	c := pod.Spec.Containers[0]
	started := true
	now := metav1.Now()
	st.Phase = v1.PodRunning
	st.Conditions = []v1.PodCondition{
		{Type: v1.PodScheduled, Status: v1.ConditionTrue, LastTransitionTime: now},
		{Type: v1.PodInitialized, Status: v1.ConditionTrue, LastTransitionTime: now},
		{Type: v1.ContainersReady, Status: v1.ConditionTrue, LastTransitionTime: now},
		{Type: v1.PodReady, Status: v1.ConditionTrue, LastTransitionTime: now},
	}
	st.ContainerStatuses = []v1.ContainerStatus{{
		Name:               c.Name,
		Image:              c.Image,
		ImageID:            c.Image,
		ContainerID:        "containerd://" + pod.Name,
		Ready:              true,
		Started:            &started,
		State:              v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: now}},
		AllocatedResources: c.Resources.Requests,
		Resources:          &v1.ResourceRequirements{Requests: c.Resources.Requests, Limits: c.Resources.Limits},
	}}
	requests := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	st.AllocatedResources = requests
	st.Resources = &v1.ResourceRequirements{Requests: requests, Limits: resourcehelper.PodLimits(pod, resourcehelper.PodResourcesOptions{})}
	return st
}

// waitScheduled waits (bounded) until the scheduler has bound the pod or
// found it unschedulable, and returns its node or the message of its
// PodScheduled=False condition.
func waitScheduled(t *testing.T, c clientset.Interface, name string) (node, msg string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		p, err := c.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		node = p.Spec.NodeName
		for _, cond := range p.Status.Conditions {
			if cond.Type == v1.PodScheduled && cond.Status == v1.ConditionFalse {
				msg = cond.Message
			}
		}
		return node != "" || msg != "", nil
	})
	if err != nil {
		t.Fatalf("pod %s neither bound nor unschedulable: %v", name, err)
	}
	return node, msg
}

// shippedOverhead is the RuntimeClass overhead vmpod ships
// (manifests/runtimeclass.yaml).
func shippedOverhead(t testing.TB) v1.ResourceList {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repo.Root(t), "manifests", "runtimeclass.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rc nodev1.RuntimeClass
	if err := yaml.UnmarshalStrict(data, &rc); err != nil {
		t.Fatalf("manifests/runtimeclass.yaml: %v", err)
	}
	if rc.Overhead == nil || rc.Overhead.PodFixed == nil {
		t.Fatal("manifests/runtimeclass.yaml has no overhead.podFixed")
	}
	return rc.Overhead.PodFixed
}
