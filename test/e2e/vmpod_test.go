//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vmpod/vmpod/pkg/scheduler/vmplacement"
	"github.com/vmpod/vmpod/pkg/vmspec"
)

// TestVMPod follows one VM pod through its life: Running, its serial
// console in the logs, its HTTP server on the pod IP, the vCPUs and memory
// its limits ask for, and an ACPI shutdown when it is deleted.
func TestVMPod(t *testing.T) {
	checkLeaks(t)
	const grace = 60
	pod := create(t, makePod("vm").limits("2", "400Mi").grace(grace).obj())
	p := waitRunning(t, pod.Name)
	log := waitLog(t, pod.Name, "VMPOD-GUEST: ready")

	t.Run("logs are the serial console", func(t *testing.T) {
		for _, want := range []string{"VMPOD-GUEST: init", "VMPOD-GUEST: ip " + p.Status.PodIP + "/", "VMPOD-GUEST: http ready"} {
			if !strings.Contains(log, want) {
				t.Errorf("no %q in kubectl logs:\n%s", want, log)
			}
		}
	})

	t.Run("the pod IP serves the guest", func(t *testing.T) {
		if out := node.httpGet(t, p.Status.PodIP); !strings.Contains(out, "200 OK") {
			t.Errorf("HTTP answer from %s:\n%s", p.Status.PodIP, out)
		}
	})

	t.Run("the guest has the limits' vCPUs and memory", func(t *testing.T) {
		m := regexp.MustCompile(`VMPOD-GUEST: cpus=(\d+) memory_kib=(\d+)`).FindStringSubmatch(log)
		if m == nil {
			t.Fatalf("no cpus= line in the log:\n%s", log)
		}
		cpus, _ := strconv.Atoi(m[1])
		kib, _ := strconv.Atoi(m[2])
		if cpus != 2 {
			t.Errorf("the guest has %d vCPUs, limits.cpu is 2", cpus)
		}
		// MemTotal is the guest RAM less what the guest kernel keeps for
		// itself (about 50 MiB for the test guest); the overhead never
		// comes out of the guest.
		const ram, kernel = 400 * 1024, 96 * 1024
		if kib > ram || kib < ram-kernel {
			t.Errorf("the guest has MemTotal %d KiB, limits.memory is %d KiB", kib, ram)
		}
	})

	t.Run("QEMU runs jailed", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out, err := node.run(ctx, qemuStatusScript, node.stateRoot, vmspec.DomainName(p.Namespace, p.Name))
		if err != nil {
			t.Fatal(err)
		}
		f := map[string]string{}
		for _, line := range strings.Split(out, "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok {
				f[k] = strings.TrimSpace(v)
			} else if k, v, ok := strings.Cut(line, " "); ok {
				f[k] = v
			}
		}
		uid := f["lease"]
		if uid == "" || uid == "0" {
			t.Fatalf("no uid lease for the pod's QEMU:\n%s", out)
		}
		ids := strings.Repeat(uid+"\t", 3) + uid
		for k, want := range map[string]string{"Uid": ids, "Gid": ids, "CapEff": "0000000000000000",
			"CapPrm": "0000000000000000", "CapBnd": "0000000000000000", "Seccomp": "2", "NoNewPrivs": "1",
			"own-mntns": "yes", "host-passwd": "no"} {
			if f[k] != want {
				t.Errorf("QEMU %s: %q, want %q", k, f[k], want)
			}
		}
	})

	t.Run("delete shuts the guest down by ACPI", func(t *testing.T) {
		rest := followLog(t, pod.Name)
		took := deletePod(t, pod.Name)
		out := rest()
		if !strings.Contains(out, "VMPOD-GUEST: poweroff") {
			t.Errorf("no ACPI poweroff on the serial console after delete:\n%s", out)
		}
		// A hard stop would come at the end of the grace period.
		if took > (grace-10)*time.Second {
			t.Errorf("delete took %v of a %ds grace period: not an ACPI shutdown", took, grace)
		}
		t.Logf("kubectl delete -> pod gone: %v", took.Round(100*time.Millisecond))
	})
}

// TestExec: kubectl exec runs a command in the guest through the QEMU guest
// agent (its output and exit code come back), an exec readiness probe
// makes the pod Ready, and a terminal exec (kubectl exec -it) is refused at
// once with the reason: the guest agent gives no TTY. On both kinds of node.
func TestExec(t *testing.T) {
	checkLeaks(t)
	for _, d := range frontDoors(t) {
		t.Run(d.name, func(t *testing.T) { testExec(t, d) })
	}
}

func testExec(t *testing.T, d frontDoor) {
	b := makePod("exec").readinessExec("cat", "/run/qemu-ga.status")
	d.place(&b.pod.Spec)
	pod := create(t, b.obj())
	waitRunning(t, pod.Name)
	waitReady(t, pod.Name)

	if out, errOut, code := kubectl(t, time.Minute, "exec", pod.Name, "--", "echo", "hello"); out != "hello\n" || code != 0 {
		t.Errorf("kubectl exec -- echo hello: %q, exit %d, stderr %q; want \"hello\\n\", 0", out, code, errOut)
	}
	if _, errOut, code := kubectl(t, time.Minute, "exec", pod.Name, "--", "sh", "-c", "echo oops >&2; exit 3"); code != 3 || !strings.Contains(errOut, "oops") {
		t.Errorf("kubectl exec -- exit 3: exit %d, stderr %q; want 3 and oops", code, errOut)
	}
	// kubectl asks for a TTY only when its own stdin is one: script(1)
	// gives it a pseudo-terminal.
	if out, code := kubectlTTY(t, time.Minute, "exec", "-it", pod.Name, "--", "sh"); code == 0 || !strings.Contains(out, "without a TTY") {
		t.Errorf("kubectl exec -it: exit %d, output %q; want a refusal naming the missing TTY", code, out)
	}
	var took []time.Duration
	for range 10 {
		start := time.Now()
		if _, errOut, code := kubectl(t, time.Minute, "exec", pod.Name, "--", "true"); code != 0 {
			t.Fatalf("kubectl exec -- true: exit %d: %s", code, errOut)
		}
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	t.Logf("kubectl exec -- true: median of 10 %v (min %v, max %v)", took[5].Round(time.Millisecond), took[0].Round(time.Millisecond), took[9].Round(time.Millisecond))
}

// TestAttachAndStats: kubectl attach streams the serial console, and the
// kubelet's stats summary (kubectl top) has the VM's CPU and memory. On
// both kinds of node.
func TestAttachAndStats(t *testing.T) {
	checkLeaks(t)
	for _, d := range frontDoors(t) {
		t.Run(d.name, func(t *testing.T) { testAttachAndStats(t, d) })
	}
}

func testAttachAndStats(t *testing.T, d frontDoor) {
	b := makePod("attach")
	d.place(&b.pod.Spec)
	pod := create(t, b.obj())
	p := waitRunning(t, pod.Name)
	waitLog(t, pod.Name, "VMPOD-GUEST: ready")

	t.Run("attach reads the serial console", func(t *testing.T) {
		// Attach, then have the guest write a line to its console.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		bin := os.Getenv("VMPOD_E2E_KUBECTL")
		if bin == "" {
			bin = "kubectl"
		}
		cmd := exec.CommandContext(ctx, bin, "--namespace", namespace, "attach", pod.Name)
		var out safeBuffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
		const marker = "attach-marker-7f3a"
		if !poll(30*time.Second, func() bool {
			kubectl(t, time.Minute, "exec", pod.Name, "--", "sh", "-c", "echo "+marker+" >/dev/console")
			return strings.Contains(out.String(), marker)
		}) {
			t.Errorf("kubectl attach never showed %q from the guest's console; it printed:\n%s", marker, out.String())
		}
	})

	t.Run("the stats summary has the VM's CPU and memory", func(t *testing.T) {
		var cpu, mem uint64
		if !poll(2*time.Minute, func() bool {
			raw, err := client.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", p.Spec.NodeName, "proxy/stats/summary").DoRaw(context.Background())
			if err != nil {
				return false
			}
			var summary struct {
				Pods []struct {
					PodRef     struct{ Name string } `json:"podRef"`
					Containers []struct {
						Name string `json:"name"`
						CPU  struct {
							UsageNanoCores *uint64 `json:"usageNanoCores"`
						} `json:"cpu"`
						Memory struct {
							WorkingSetBytes *uint64 `json:"workingSetBytes"`
						} `json:"memory"`
					} `json:"containers"`
				} `json:"pods"`
			}
			if json.Unmarshal(raw, &summary) != nil {
				return false
			}
			for _, sp := range summary.Pods {
				for _, c := range sp.Containers {
					if sp.PodRef.Name == pod.Name && c.Name == "vm" && c.CPU.UsageNanoCores != nil && c.Memory.WorkingSetBytes != nil {
						cpu, mem = *c.CPU.UsageNanoCores, *c.Memory.WorkingSetBytes
						return mem > 0
					}
				}
			}
			return false
		}) {
			t.Fatalf("no CPU and memory for the VM container in the kubelet's stats summary")
		}
		// The guest's RAM is QEMU's, in the container's cgroup: more than
		// the guest kernel keeps resident after boot, less than the limit
		// plus the overhead.
		if mem < 32<<20 || mem > 1<<30 {
			t.Errorf("the VM's working set is %d bytes, want between 32 MiB and 1 GiB", mem)
		}
		t.Logf("stats summary: the VM uses %d nanocores and %d MiB", cpu, mem>>20)
	})
}

// safeBuffer is a bytes.Buffer for a writer and a reader on two goroutines.
type safeBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *safeBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *safeBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestPoweroffRestarts: a guest that powers itself off ends its container
// with exit 0, and restartPolicy Always makes the kubelet boot it again.
// The test guest's /init is replaced by its poweroff script through the
// kernel command line.
func TestPoweroffRestarts(t *testing.T) {
	checkLeaks(t)
	pod := create(t, makePod("poweroff").restart(corev1.RestartPolicyAlways).
		annotation(vmspec.AnnotationKernelCmdline, "rdinit=/bin/guest-poweroff").obj())
	var cs corev1.ContainerStatus
	if !poll(bootTimeout, func() bool {
		p := getPod(t, pod.Name)
		if len(p.Status.ContainerStatuses) == 0 {
			return false
		}
		cs = p.Status.ContainerStatuses[0]
		return cs.RestartCount >= 1
	}) {
		t.Fatalf("not restarted within %v: %+v\n%s", bootTimeout, cs, describe(pod.Name))
	}
	if term := cs.LastTerminationState.Terminated; term == nil || term.ExitCode != 0 {
		t.Errorf("last termination %+v, want exit 0 (guest poweroff)", term)
	}
}

// TestBadAnnotation: a VM pod with an invalid vmpod.io/ annotation fails
// with an event that names the annotation, whether the scheduler sees it
// or the pod is bound to the node directly.
func TestBadAnnotation(t *testing.T) {
	checkLeaks(t)
	bad := func(prefix string) *podBuilder {
		return makePod(prefix).annotation(vmspec.AnnotationFirmware, "efi")
	}
	t.Run("scheduler", func(t *testing.T) {
		pod := create(t, bad("bad-sched").obj())
		e := waitEvent(t, pod.Name, time.Minute, "FailedScheduling", vmspec.AnnotationFirmware)
		t.Logf("event: %s", e)
	})
	t.Run("node", func(t *testing.T) {
		pod := create(t, bad("bad-node").onNodeNamed(vmpodNode(t)).obj())
		e := waitEvent(t, pod.Name, 2*time.Minute, vmspec.AnnotationFirmware)
		t.Logf("event: %s", e)
		if p := getPod(t, pod.Name); p.Status.Phase == corev1.PodRunning {
			t.Errorf("the pod with a bad annotation is Running")
		}
	})
}

// TestKVMRequired: a pod that requires KVM stays Pending on a cluster
// without KVM, with the scheduler's reason; on a cluster with KVM nodes it
// is bound to one of them.
func TestKVMRequired(t *testing.T) {
	checkLeaks(t)
	nodes, err := client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{LabelSelector: vmspec.LabelKVM + "=true"})
	if err != nil {
		t.Fatal(err)
	}
	pod := create(t, makePod("kvm").annotation(vmspec.AnnotationAccel, "kvm").obj())
	if len(nodes.Items) > 0 {
		kvm := map[string]bool{}
		for _, n := range nodes.Items {
			kvm[n.Name] = true
		}
		var node string
		poll(time.Minute, func() bool { node = getPod(t, pod.Name).Spec.NodeName; return node != "" })
		if !kvm[node] {
			t.Errorf("pod bound to %q, want one of the KVM nodes %v", node, kvm)
		}
		return
	}
	e := waitEvent(t, pod.Name, time.Minute, "FailedScheduling", vmplacement.ErrReasonNoKVM)
	t.Logf("event: %s", e)
	if p := getPod(t, pod.Name); p.Spec.NodeName != "" || p.Status.Phase != corev1.PodPending {
		t.Errorf("pod on %q in phase %s, want Pending and unbound", p.Spec.NodeName, p.Status.Phase)
	}
}

// TestBootTimes measures, for one pod and for five at once, the time from
// the create (kubectl apply) to Running, to the guest's first serial line
// in the logs (its kernel's), and to its /init's first line.
func TestBootTimes(t *testing.T) {
	checkLeaks(t)
	for _, n := range []int{1, 5} {
		t.Run(fmt.Sprintf("%d pods", n), func(t *testing.T) {
			var names []string
			start := time.Now()
			for i := range n {
				names = append(names, create(t, makePod(fmt.Sprintf("boot%d-%d", n, i)).obj()).Name)
			}
			// serial: the first line on the console (the guest kernel's);
			// init: the test guest's /init, its first line of user space.
			type times struct{ running, serial, init time.Duration }
			got := make([]times, n)
			var wg sync.WaitGroup
			for i, name := range names {
				wg.Go(func() {
					poll(bootTimeout, func() bool {
						phase := getPod(t, name).Status.Phase
						if got[i].running == 0 && phase == corev1.PodRunning {
							got[i].running = time.Since(start)
						}
						if got[i].running != 0 && got[i].serial == 0 && logs(name) != "" {
							got[i].serial = time.Since(start)
						}
						if got[i].serial != 0 && strings.Contains(logs(name), "VMPOD-GUEST: init") {
							got[i].init = time.Since(start)
							return true
						}
						return phase == corev1.PodFailed
					})
				})
			}
			wg.Wait()
			var worst times
			r := func(d time.Duration) time.Duration { return d.Round(100 * time.Millisecond) }
			for i, g := range got {
				if g.init == 0 {
					t.Fatalf("pod %s: no VMPOD-GUEST: init on the console within %v\n%s", names[i], bootTimeout, describe(names[i]))
				}
				worst = times{max(worst.running, g.running), max(worst.serial, g.serial), max(worst.init, g.init)}
				t.Logf("%s: apply -> Running %v, -> first serial line %v, -> /init %v", names[i], r(g.running), r(g.serial), r(g.init))
			}
			fmt.Printf("e2e boot times, %d pod(s) at once, slowest: apply -> Running %v, -> first serial line %v, -> guest /init %v\n",
				n, r(worst.running), r(worst.serial), r(worst.init))
		})
	}
}

// vmpodNode is a node the labeller says runs vmpod.
func vmpodNode(t *testing.T) string {
	t.Helper()
	nodes, err := client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{LabelSelector: vmspec.LabelRuntime + "=true"})
	if err != nil || len(nodes.Items) == 0 {
		t.Fatalf("no node with %s=true: %v", vmspec.LabelRuntime, err)
	}
	return nodes.Items[0].Name
}
