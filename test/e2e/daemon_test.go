//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/vmpod/vmpod/pkg/vmspec"
)

// unitPIDScript prints the pid of the node's one process whose program
// is $1 (its argv[0]'s last element) and, if $2 is set, whose argv[1] is
// $2: the one in the node's mount namespace, so no other node's or
// cluster's on a shared machine (Docker's containerd, the other local
// node's kubelet). It fails unless exactly one runs.
const unitPIDScript = `
prog=$1 sub=${2:-} self=$(readlink /proc/self/ns/mnt) found=""
for d in /proc/[0-9]*; do
  mapfile -d '' -t argv 2>/dev/null <"$d/cmdline" || continue
  [ "${argv[0]##*/}" = "$prog" ] || continue
  [ -z "$sub" ] || [ "${argv[1]:-}" = "$sub" ] || continue
  [ "$(readlink "$d/ns/mnt")" = "$self" ] || continue
  found="$found ${d#/proc/}"
done
set -- $found
[ $# -eq 1 ] || { echo "want one $prog $sub on the node, found:$found" >&2; exit 1; }
echo "$1"
`

// qemuPIDScript prints the pid of the QEMU of domain $2 under state root
// $1 (QEMU runs in a mount namespace of its own).
const qemuPIDScript = `
state=$1 domain=$2
for d in /proc/[0-9]*; do
  mapfile -d '' -t argv 2>/dev/null <"$d/cmdline" || continue
  case "${argv[0]##*/}" in qemu-system-*) ;; *) continue ;; esac
  case " ${argv[*]} " in *" guest=$domain,"*) ;; *) continue ;; esac
  case " ${argv[*]} " in *"$state/pods/"*) echo "${d#/proc/}"; exit 0 ;; esac
done
echo "no QEMU for domain $domain under $state" >&2
exit 1
`

// A kill is a row of the kill matrix: one long-lived component of the
// node killed with SIGKILL under running VM pods.
type kill struct {
	component string
	// unit: the node's init restarts it (hack/local/restart-always.sh
	// locally, the units on a real node); otherwise it is one pod's
	// (the shim, QEMU), started again only with its pod's container.
	unit bool
	// pid finds the pid to kill on node n, for the target pod p.
	pid func(t *testing.T, n *testNode, p corev1.Pod) int
	// keeps: every VM runs on, the same container; otherwise the
	// target pod's container ends and its restart policy starts a new
	// one, and no other pod's is touched.
	keeps bool
}

// unitPID is the pid of the node's one prog (argv[1] sub, if not "").
func unitPID(prog, sub string) func(*testing.T, *testNode, corev1.Pod) int {
	return func(t *testing.T, n *testNode, _ corev1.Pod) int {
		return n.pidOf(t, unitPIDScript, prog, sub)
	}
}

// qemuPID is the pid of the target pod's QEMU.
func qemuPID(t *testing.T, n *testNode, p corev1.Pod) int {
	return n.pidOf(t, qemuPIDScript, n.stateRoot, vmspec.DomainName(p.Namespace, p.Name))
}

// shimPID is the pid of the target pod's shim.
func shimPID(t *testing.T, n *testNode, p corev1.Pod) int {
	return n.pidOf(t, shimScript, n.stateRoot, vmspec.DomainName(p.Namespace, p.Name))
}

// shimScript: the sandbox from the QEMU of domain $2 (its VM dir is
// $1/pods/<the sandbox id's first 16 hex digits>/), then the one vmpod
// shim serving that sandbox (-id <sandbox id>), in the node's mount
// namespace: containerd-shim-vmpod-v2, or "vm-runtime shim" once it has
// re-executed itself.
const shimScript = `
state=$1 domain=$2 sandbox=""
for d in /proc/[0-9]*; do
  mapfile -d '' -t argv 2>/dev/null <"$d/cmdline" || continue
  case "${argv[0]##*/}" in qemu-system-*) ;; *) continue ;; esac
  case " ${argv[*]} " in *" guest=$domain,"*) ;; *) continue ;; esac
  for a in "${argv[@]}"; do
    case "$a" in *"$state/pods/"*) sandbox=${a#*"$state/pods/"}; sandbox=${sandbox%%/*}; break 2 ;; esac
  done
done
[ -n "$sandbox" ] || { echo "no QEMU for domain $domain under $state" >&2; exit 1; }
found="" self=$(readlink /proc/self/ns/mnt)
for d in /proc/[0-9]*; do
  mapfile -d '' -t argv 2>/dev/null <"$d/cmdline" || continue
  case "${argv[0]##*/} ${argv[1]:-}" in "containerd-shim-vmpod-v2 "* | "vm-runtime shim") ;; *) continue ;; esac
  [ "$(readlink "$d/ns/mnt")" = "$self" ] || continue
  case " ${argv[*]} " in *" -id $sandbox"*) found="$found ${d#/proc/}" ;; esac
done
set -- $found
[ $# -eq 1 ] || { echo "want one shim of sandbox $sandbox, found:$found" >&2; exit 1; }
echo "$1"
`

// pidOf runs a pid-finding script on the node: 0 if it found none.
func (n *testNode) pidOf(t *testing.T, script string, args ...string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := n.run(ctx, script, args...)
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(out))
	return pid
}

// killMatrix is each node's rows, in the order they run: the rows that
// keep every VM first, so that the runtime's takes over VMs that lived
// through the kubelet's and containerd's loss.
func killMatrix(d frontDoor) []kill {
	if d.node == criNode {
		return []kill{
			{component: "kubelet", unit: true, pid: unitPID("kubelet", ""), keeps: true},
			{component: "vm-runtime cri", unit: true, pid: unitPID("vm-runtime", "cri"), keeps: true},
			{component: "QEMU (one pod's)", pid: qemuPID},
		}
	}
	return []kill{
		{component: "kubelet", unit: true, pid: unitPID("kubelet", ""), keeps: true},
		{component: "containerd", unit: true, pid: unitPID("containerd", ""), keeps: true},
		{component: "vm-runtime daemon", unit: true, pid: unitPID("vm-runtime", "daemon"), keeps: true},
		{component: "shim (one pod's)", pid: shimPID},
		{component: "QEMU (one pod's)", pid: qemuPID},
	}
}

// The kill matrix's rows as they ran, for the summary at the end of the
// run (docs/reliability.md).
var matrix struct {
	sync.Mutex
	rows []string
}

// TestKillMatrix: with a Deployment of 5 running VM pods on a node, each
// long-lived component of that node is killed with SIGKILL in turn
// (killMatrix), on both kinds of node. The node's init restarts its units
// (the kubelet, containerd, vm-runtime); a pod's shim and QEMU are its
// own. After each kill:
//
//   - where the VMs are kept (kubelet, containerd, vm-runtime): every pod
//     Running and Ready with the same container, exec works in each, the
//     console goes on (kubectl logs), the guest answers HTTP; after the
//     runtime's, its metrics show every VM taken over (adopted) and
//     running;
//   - where the VM goes (a pod's shim, its QEMU): that pod's container
//     ends and a new one runs by its restart policy, Ready, exec works,
//     and no other pod's container changed.
//
// The scale to 0 afterwards leaves nothing on the node. The table of what
// each kill did is printed at the end (docs/reliability.md).
func TestKillMatrix(t *testing.T) {
	checkLeaks(t)
	const replicas = 5
	t.Cleanup(func() {
		matrix.Lock()
		defer matrix.Unlock()
		if len(matrix.rows) > 0 {
			fmt.Fprintf(os.Stderr, "kill matrix (%d VM pods on the node; `make e2e`, test/e2e TestKillMatrix):\n| node | killed (SIGKILL) | back in | the VMs | serving again in |\n|---|---|---|---|---|\n%s\n",
				replicas, strings.Join(matrix.rows, "\n"))
		}
	})
	for _, d := range frontDoors(t) {
		t.Run(d.name, func(t *testing.T) {
			_, sel, scaleToZero := d.vmDeployment(t, "killed", replicas, nil)
			for _, p := range podsOf(t, sel) {
				// A restart before any kill is no kill's doing, but a VM
				// pod that ended on its own: say how.
				if cs := p.Status.ContainerStatuses[0]; cs.RestartCount != 0 {
					t.Errorf("pod %s restarted %d time(s) before any kill: %s", p.Name, cs.RestartCount, lastTermination(cs))
				}
			}

			for i, k := range killMatrix(d) {
				ok := t.Run(k.component, func(t *testing.T) {
					pods := podsOf(t, sel)
					if len(pods) != replicas {
						t.Fatalf("%d pods before the kill, want %d", len(pods), replicas)
					}
					// Each row that ends a VM takes another pod's.
					target := pods[i%len(pods)]
					containers := map[string]string{}
					restarts := map[string]int32{}
					for _, p := range pods {
						containers[p.Name] = p.Status.ContainerStatuses[0].ContainerID
						restarts[p.Name] = p.Status.ContainerStatuses[0].RestartCount
					}
					row := d.kill(t, k, target)
					var recovered time.Duration
					if k.keeps {
						recovered = d.checkKept(t, sel, containers, row.killed)
					} else {
						recovered = d.checkRestarted(t, sel, containers, restarts[target.Name], target.Name, row.killed)
					}
					if k.component == "vm-runtime daemon" || k.component == "vm-runtime cri" {
						d.node.checkAdopted(t, pods, replicas)
					}
					verdict := "kept, same containers"
					if !k.keeps {
						verdict = "that pod's restarted by its policy, the others kept"
					}
					back := "-"
					if k.unit {
						back = row.back.Round(100 * time.Millisecond).String()
					}
					matrix.Lock()
					matrix.rows = append(matrix.rows, fmt.Sprintf("| %s | %s | %s | %s | %v |", d.name, k.component, back, verdict, recovered.Round(100*time.Millisecond)))
					matrix.Unlock()
				})
				if !ok {
					break // the next row would measure this one's wreck
				}
			}

			scaleToZero()
		})
	}
}

// killed is when a row's kill happened, and how long its unit took to
// come back.
type killed struct {
	killed time.Time
	back   time.Duration
}

// kill kills k's process for target with SIGKILL and, for a unit, waits
// until another one runs.
func (d frontDoor) kill(t *testing.T, k kill, target corev1.Pod) killed {
	t.Helper()
	pid := k.pid(t, d.node, target)
	if pid == 0 {
		t.Fatalf("no %s to kill on the node", k.component)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	_, err := d.node.run(ctx, `kill -KILL "$1"`, strconv.Itoa(pid))
	cancel()
	if err != nil {
		t.Fatalf("kill %s (pid %d): %v", k.component, pid, err)
	}
	r := killed{killed: time.Now()}
	if k.unit {
		if !poll(time.Minute, func() bool { p := k.pid(t, d.node, target); return p != 0 && p != pid }) {
			t.Fatalf("%s (pid %d, killed) was not started again within a minute", k.component, pid)
		}
		r.back = time.Since(r.killed)
	}
	t.Logf("%s (pid %d) killed; %s", k.component, pid, map[bool]string{true: "started again in " + r.back.Round(100*time.Millisecond).String(), false: "a pod's, not restarted by the node"}[k.unit])
	return r
}

// checkKept: every pod of sel runs its container of containers, Ready,
// exec works in it and reaches its console, and its guest answers HTTP.
// It returns how long after the kill every pod had answered an exec and
// was Ready.
func (d frontDoor) checkKept(t *testing.T, sel map[string]string, containers map[string]string, since time.Time) time.Duration {
	t.Helper()
	for _, p := range podsOf(t, sel) {
		d.checkServes(t, p.Name, "after the kill")
	}
	ready := waitAllReady(t, sel)
	for _, p := range podsOf(t, sel) {
		cs := p.Status.ContainerStatuses[0]
		if containers[p.Name] != cs.ContainerID || p.Status.Phase != corev1.PodRunning {
			t.Errorf("pod %s after the kill: phase %s, container %s (was %s), restarts %d (%s); want the same container running",
				p.Name, p.Status.Phase, cs.ContainerID, containers[p.Name], cs.RestartCount, lastTermination(cs))
		}
		if body := d.node.httpGet(t, p.Status.PodIP); !strings.Contains(body, "vmpod-guest") {
			t.Errorf("pod %s: HTTP from the guest after the kill = %q", p.Name, body)
		}
	}
	return ready.Sub(since)
}

// checkRestarted: the target pod has a new container, Ready, serving, at
// the first try (one restart more than before: no failed start between);
// every other pod of sel its container of containers. It returns how long
// after the kill the target was Ready again.
func (d frontDoor) checkRestarted(t *testing.T, sel map[string]string, containers map[string]string, restarts int32, target string, since time.Time) time.Duration {
	t.Helper()
	var p *corev1.Pod
	if !poll(2*bootTimeout, func() bool {
		p = getPod(t, target)
		cs := p.Status.ContainerStatuses
		return len(cs) > 0 && cs[0].ContainerID != "" && cs[0].ContainerID != containers[target] && cs[0].Ready
	}) {
		t.Fatalf("pod %s has no new Ready container %v after the kill:\n%s", target, 2*bootTimeout, describe(target))
	}
	ready := time.Now()
	cs := p.Status.ContainerStatuses[0]
	t.Logf("pod %s: container %s after the kill (was %s), restarts %d: %s", target, cs.ContainerID, containers[target], cs.RestartCount, lastTermination(cs))
	if cs.RestartCount != restarts+1 {
		t.Errorf("pod %s: %d restarts after the kill, was %d: want one, the new container started at the first try (%s)",
			target, cs.RestartCount, restarts, lastTermination(cs))
	}
	d.checkServes(t, target, "in its new container")
	for _, o := range podsOf(t, sel) {
		if o.Name == target {
			continue
		}
		if ocs := o.Status.ContainerStatuses[0]; ocs.ContainerID != containers[o.Name] {
			t.Errorf("pod %s, not the target: container %s, was %s: killing another pod's component touched it (%s)",
				o.Name, ocs.ContainerID, containers[o.Name], lastTermination(ocs))
		}
	}
	return ready.Sub(since)
}

// checkServes: kubectl exec works in the pod (the first calls may come
// while the runtime takes its VMs over) and what it writes to the guest's
// console reaches kubectl logs.
func (d frontDoor) checkServes(t *testing.T, pod, when string) {
	t.Helper()
	marker := fmt.Sprintf("VMPOD-TEST: %s %s %d", pod, strings.ReplaceAll(when, " ", "-"), time.Now().UnixNano())
	var out, errOut string
	code := -1
	if !poll(time.Minute, func() bool {
		out, errOut, code = kubectl(t, time.Minute, "exec", pod, "--", "sh", "-c", "echo '"+marker+"' >/dev/console; echo ok")
		return code == 0
	}) || out != "ok\n" {
		t.Errorf("pod %s: kubectl exec %s: %q, exit %d, stderr %q", pod, when, out, code, errOut)
		return
	}
	if !poll(30*time.Second, func() bool { return strings.Contains(logs(pod), marker) }) {
		t.Errorf("pod %s: no %q in kubectl logs 30 s after the exec", pod, marker)
	}
}

// waitAllReady waits until every pod of sel is Ready and returns when.
func waitAllReady(t *testing.T, sel map[string]string) time.Time {
	t.Helper()
	if !poll(time.Minute, func() bool {
		for _, p := range podsOf(t, sel) {
			if len(p.Status.ContainerStatuses) == 0 || !p.Status.ContainerStatuses[0].Ready {
				return false
			}
		}
		return true
	}) {
		t.Errorf("not every pod Ready a minute after the kill")
	}
	return time.Now()
}

// checkAdopted: the restarted runtime's metrics show the VMs it took
// over, each running.
func (n *testNode) checkAdopted(t *testing.T, pods []corev1.Pod, replicas int) {
	t.Helper()
	if n.metricsURL == "" {
		t.Errorf("no metrics URL for the node: hack/local-up.sh runs its runtime with --metrics-address and sets VMPOD_E2E_METRICS_URL and VMPOD_E2E_CRI_METRICS_URL")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	out, err := n.run(ctx, `curl -sSf "$1"`, n.metricsURL)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^vmpod_vm_recoveries_total\{result="adopted"\} ([0-9]+)$`).FindStringSubmatch(out)
	adopted := 0
	if m != nil {
		adopted, _ = strconv.Atoi(m[1])
	}
	if adopted < replicas {
		t.Errorf("vmpod_vm_recoveries_total{result=\"adopted\"} %d after the restart, want at least %d", adopted, replicas)
	}
	for _, p := range pods {
		info := regexp.MustCompile(`(?m)^vmpod_vm_info\{[^}]*pod="` + regexp.QuoteMeta(p.Name) + `"[^}]*state="running"[^}]*\} 1$`)
		if !info.MatchString(out) {
			t.Errorf("no running vmpod_vm_info of pod %s in the restarted runtime's metrics", p.Name)
		}
	}
}

// lastTermination is how the container's previous instance ended, as the
// kubelet recorded it.
func lastTermination(cs corev1.ContainerStatus) string {
	t := cs.LastTerminationState.Terminated
	if t == nil {
		return "no earlier instance recorded"
	}
	return fmt.Sprintf("the last one ended %s with exit %d, reason %q, message %q", t.FinishedAt.Format(time.RFC3339), t.ExitCode, t.Reason, t.Message)
}
