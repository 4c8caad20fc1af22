//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestStorm (issue 28, item 10): 50 VM pods, half on each kind of node,
// created and deleted in waves: each wave's pods are created while the
// wave before is being deleted, so that starts and stops overlap on both
// runtimes, and a pod may be deleted while its guest still boots (its
// grace period then ends in a kill). Every pod must reach Running and be
// gone after its delete; the leak checker then finds each node as it was
// (no domain, QEMU, jailed process, tap, qdisc, netns, mount, cgroup, uid
// lease, state dir or checkpoint left, the runtimes' goroutines and fds
// back). The table of the waves goes to stderr.
func TestStorm(t *testing.T) {
	checkLeaks(t)
	const waves, perNode = 5, 5
	doors := frontDoors(t)
	run := uniqueName("storm")
	var rows []string
	t.Cleanup(func() {
		if len(rows) > 0 {
			fmt.Fprintf(os.Stderr, "storm (%d VM pods in %d waves of %d a node; `make e2e`, test/e2e TestStorm):\n| wave | created -> all Running | wave before deleted -> all gone | QEMUs on each node once the wave runs |\n|---|---|---|---|\n%s\n",
				waves*perNode*len(doors), waves, perNode, strings.Join(rows, "\n"))
		}
	})
	waveSel := func(w int) map[string]string { return map[string]string{"storm": run, "wave": strconv.Itoa(w)} }
	stormStart := time.Now()
	for w := range waves + 1 {
		start := time.Now()
		if w < waves {
			for _, d := range doors {
				for i := range perNode {
					b := makePod(fmt.Sprintf("%s-%d-%d", run, w, i)).grace(5)
					b.pod.Labels = waveSel(w)
					d.place(&b.pod.Spec)
					create(t, b.obj())
				}
			}
		}
		// The wave before goes while this one starts.
		var gone time.Duration
		if w > 0 {
			for _, p := range podsOf(t, waveSel(w-1)) {
				if err := client.CoreV1().Pods(namespace).Delete(context.Background(), p.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
					t.Fatalf("delete pod %s: %v", p.Name, err)
				}
			}
			waitNoPods(t, waveSel(w-1))
			gone = time.Since(start)
		}
		if w == waves {
			rows = append(rows, fmt.Sprintf("| %d (none made) | - | %v | - |", w, gone.Round(100*time.Millisecond)))
			break
		}
		running := waitWaveRunning(t, waveSel(w), perNode*len(doors))
		var peak []string
		for _, d := range doors {
			counts, _, err := d.node.leftovers()
			if err != nil {
				t.Fatal(err)
			}
			peak = append(peak, d.name+" "+field(counts, "qemu"))
		}
		rows = append(rows, fmt.Sprintf("| %d | %v | %v | %s |", w, running.Round(100*time.Millisecond), gone.Round(100*time.Millisecond), strings.Join(peak, ", ")))
	}
	t.Logf("storm: %d VM pods made and deleted in %v", waves*perNode*len(doors), time.Since(stormStart).Round(time.Second))
}

// waitWaveRunning waits until the n pods of sel are all Running and
// returns how long it took; a pod that failed, or one that does not run
// within bootTimeout, fails the test with what its node said.
func waitWaveRunning(t *testing.T, sel map[string]string, n int) time.Duration {
	t.Helper()
	start := time.Now()
	var pods []corev1.Pod
	running := func() bool {
		pods = podsOf(t, sel)
		ok := 0
		for _, p := range pods {
			if p.Status.Phase == corev1.PodFailed {
				t.Fatalf("pod %s failed:\n%s", p.Name, describe(p.Name))
			}
			if p.Status.Phase == corev1.PodRunning {
				ok++
			}
		}
		return ok == n
	}
	if !poll(bootTimeout, running) {
		for _, p := range pods {
			if p.Status.Phase != corev1.PodRunning {
				t.Errorf("pod %s on %s is %s after %v:\n%s", p.Name, p.Spec.NodeName, p.Status.Phase, bootTimeout, describe(p.Name))
			}
		}
		t.FailNow()
	}
	return time.Since(start)
}
