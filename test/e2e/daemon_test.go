//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// killRuntimeScript kills the node's VM runtime, `vm-runtime <sub>` (the
// node daemon under containerd's shims, or the CRI server of a VM-only
// node), with SIGKILL, and prints its pid: the one in the node's mount
// namespace, so no other cluster's on a shared machine. The node runs it
// as its unit would, restarted when it ends (hack/local/restart-always.sh).
const killRuntimeScript = `
sub=$1 self=$(readlink /proc/self/ns/mnt) found=""
for d in /proc/[0-9]*; do
  mapfile -d '' -t argv 2>/dev/null <"$d/cmdline" || continue
  [ "${argv[0]##*/} ${argv[1]:-}" = "vm-runtime $sub" ] || continue
  [ "$(readlink "$d/ns/mnt")" = "$self" ] || continue
  found="$found ${d#/proc/}"
done
set -- $found
[ $# -eq 1 ] || { echo "want one vm-runtime $sub on the node, found: $found" >&2; exit 1; }
kill -KILL "$1"
echo "$1"
`

// runtimePID is the pid of `vm-runtime <sub>` on the node, 0 if none
// runs (yet).
func (n *testNode) runtimePID(t *testing.T, sub string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, _ := n.run(ctx, strings.Replace(killRuntimeScript, `kill -KILL "$1"`, ":", 1), sub)
	pid, _ := strconv.Atoi(strings.TrimSpace(out))
	return pid
}

// TestRuntimeKilled: the node's VM runtime is killed (SIGKILL) under a
// Deployment of 5 running VM pods and restarted, as its systemd unit
// restarts it: on a containerd node the node daemon the shims ask, on a
// VM-only node vm-runtime cri itself. Every pod stays Running and Ready,
// with the same container and no restart; kubectl exec works in each;
// the Service-facing guest answers; the console goes on (kubectl logs);
// and the scale to 0 afterwards leaves nothing on the node.
func TestRuntimeKilled(t *testing.T) {
	const replicas = 5
	for _, d := range frontDoors(t) {
		t.Run(d.name, func(t *testing.T) {
			sub := "daemon"
			if d.node == criNode {
				sub = "cri"
			}
			before, beforeItems, err := d.node.leftovers()
			if err != nil {
				t.Fatal(err)
			}
			name := uniqueName("killed")
			sel := map[string]string{"app": name}
			tmpl := vmTemplate(sel)
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
			waitDeployment(t, name, replicas)
			pods := podsOf(t, sel)
			containers := map[string]string{}
			for _, p := range pods {
				cs := p.Status.ContainerStatuses[0]
				containers[p.Name] = cs.ContainerID
				// A restart before the kill is no fault of the kill's, but
				// a VM pod that ended on its own: say how.
				if cs.RestartCount != 0 {
					t.Errorf("pod %s restarted %d time(s) before the runtime was killed: %s", p.Name, cs.RestartCount, lastTermination(cs))
				}
			}

			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			out, err := d.node.run(ctx, killRuntimeScript, sub)
			cancel()
			if err != nil {
				t.Fatalf("kill vm-runtime %s: %v", sub, err)
			}
			killed, _ := strconv.Atoi(strings.TrimSpace(out))
			start := time.Now()
			if !poll(time.Minute, func() bool { pid := d.node.runtimePID(t, sub); return pid != 0 && pid != killed }) {
				t.Fatalf("vm-runtime %s (pid %d, killed) was not started again within a minute", sub, killed)
			}
			t.Logf("vm-runtime %s killed (pid %d) and started again in %v", sub, killed, time.Since(start).Round(100*time.Millisecond))

			for _, p := range pods {
				marker := fmt.Sprintf("VMPOD-TEST: %s after the runtime restart", p.Name)
				var out, errOut string
				code := -1
				// The first calls may come while the runtime takes its VMs over.
				if !poll(time.Minute, func() bool {
					out, errOut, code = kubectl(t, time.Minute, "exec", p.Name, "--", "sh", "-c", "echo '"+marker+"' >/dev/console; echo ok")
					return code == 0
				}) || out != "ok\n" {
					t.Errorf("pod %s: kubectl exec after the restart: %q, exit %d, stderr %q", p.Name, out, code, errOut)
					continue
				}
				if !poll(30*time.Second, func() bool { return strings.Contains(logs(p.Name), marker) }) {
					t.Errorf("pod %s: no %q in kubectl logs 30 s after the exec", p.Name, marker)
				}
			}
			// The kubelet sees the same containers, never restarted,
			// Ready again (its probes answered by the same guests).
			if !poll(time.Minute, func() bool {
				for _, p := range podsOf(t, sel) {
					if len(p.Status.ContainerStatuses) == 0 || !p.Status.ContainerStatuses[0].Ready {
						return false
					}
				}
				return true
			}) {
				t.Errorf("not every pod Ready a minute after the restart")
			}
			// The runtime's metrics: the VMs it took over, running.
			if d.node.metricsURL == "" {
				t.Errorf("no metrics URL for the %s node: hack/local-up.sh runs its runtime with --metrics-address and sets VMPOD_E2E_METRICS_URL and VMPOD_E2E_CRI_METRICS_URL", d.name)
			} else {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				out, err := d.node.run(ctx, `curl -sSf "$1"`, d.node.metricsURL)
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
			now := podsOf(t, sel)
			if len(now) != replicas {
				t.Errorf("%d pods after the restart, want %d", len(now), replicas)
			}
			for _, p := range now {
				cs := p.Status.ContainerStatuses[0]
				if containers[p.Name] != cs.ContainerID || p.Status.Phase != corev1.PodRunning {
					t.Errorf("pod %s after the restart: phase %s, container %s (was %s), restarts %d (%s); want the same container running",
						p.Name, p.Status.Phase, cs.ContainerID, containers[p.Name], cs.RestartCount, lastTermination(cs))
				}
				if body := d.node.httpGet(t, p.Status.PodIP); !strings.Contains(body, "vmpod-guest") {
					t.Errorf("pod %s: HTTP from the guest after the restart = %q", p.Name, body)
				}
			}

			if _, err := deps.Patch(context.Background(), name, types.MergePatchType, []byte(`{"spec":{"replicas":0}}`), metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
			waitNoPods(t, sel)
			if after, err := d.node.waitLeftovers(before, beforeItems, time.Minute); err != nil {
				t.Errorf("left on the node after scale to 0: %v\nbefore: %s\nafter:  %s", err, before, after)
			}
		})
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
