//go:build e2e

package e2e

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// TestDiskFull (issue 28, item 13), on both kinds of node. hack/local-up.sh
// gives each node's state root a file system of its own, which the test
// fills:
//   - a new VM pod's start fails with an event that names the state root
//     and says it is out of space, and leaves no VM behind (no QEMU, no
//     jailed process, no checkpoint, uid lease or domain); once room is
//     made, the kubelet's retry starts it;
//   - with the pod running and the state root full again, a write in the
//     guest pauses the VM (kubectl logs says so) instead of failing, and
//     completes once room is made.
func TestDiskFull(t *testing.T) {
	checkLeaks(t)
	for _, d := range frontDoors(t) {
		t.Run(d.name, func(t *testing.T) {
			n := d.node
			before, beforeItems, err := n.leftovers()
			if err != nil {
				t.Fatal(err)
			}
			n.fill(t, 0)
			// As a Deployment's: the kubelet retries a container
			// that failed to start.
			b := makePod("full").grace(30).restart(corev1.RestartPolicyAlways)
			d.place(&b.pod.Spec)
			pod := create(t, b.obj())
			ev := waitEvent(t, pod.Name, 2*time.Minute, "is out of space", n.stateRoot)
			t.Logf("the pod's event: %s", ev)
			// No VM was made, or what was made is undone: the runtime's
			// counts are as before the pod. (The kubelet's pod dir and
			// cgroup, and on the containerd node the sandbox, are the
			// pod's, not the VM's.)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			for {
				now, items, err := n.leftovers()
				if err != nil {
					t.Fatal(err)
				}
				var more []string
				for _, k := range []string{"qemu", "jailed", "virtiofsd", "entries"} {
					if a, b := field(now, k), field(before, k); a != b {
						more = append(more, k+"="+a+" (was "+b+")")
					}
				}
				for _, it := range missing(items, beforeItems) {
					if strings.HasPrefix(it, "entry ") {
						more = append(more, it)
					}
				}
				if len(more) == 0 {
					break
				}
				if ctx.Err() != nil {
					t.Fatalf("with the state root full, the failed VM pod left: %s", strings.Join(more, ", "))
				}
				time.Sleep(2 * time.Second)
			}
			if cs := getPod(t, pod.Name).Status.ContainerStatuses; len(cs) > 0 && cs[0].State.Running != nil {
				t.Fatalf("pod %s's container runs with its node's state root full: %+v", pod.Name, cs[0].State)
			}

			freed := n.unfill(t)
			waitRunning(t, pod.Name)
			t.Logf("Running %v after room was made", time.Since(freed).Round(100*time.Millisecond))
			waitLog(t, pod.Name, "VMPOD-GUEST: qemu-ga ready")

			// A running guest's write into a full state root.
			n.fill(t, 4<<20)
			type result struct {
				out, errOut string
				code        int
				err         error
			}
			wrote := make(chan result, 1)
			go func() {
				out, errOut, code, err := kubectlNoFatal(4*time.Minute, "exec", pod.Name, "--", "sh", "-c",
					"dd if=/dev/urandom of=/mnt/fill bs=1M count=12 conv=fsync 2>&1 && echo wrote")
				wrote <- result{out, errOut, code, err}
			}()
			waitLog(t, pod.Name, "vmpod: the VM is paused: a write to its disk found the node's state dir")
			if p := getPod(t, pod.Name); p.Status.Phase != corev1.PodRunning {
				t.Errorf("pod %s is %s while its VM waits for room, want Running", pod.Name, p.Status.Phase)
			}
			select {
			case r := <-wrote:
				t.Fatalf("the guest's write ended while the state root was full: %+v", r)
			case <-time.After(5 * time.Second):
			}
			freed = n.unfill(t)
			waitLog(t, pod.Name, "vmpod: the VM runs on")
			select {
			case r := <-wrote:
				if r.err != nil || r.code != 0 || !strings.Contains(r.out, "wrote") {
					t.Errorf("the guest's write after room was made: exit %d, %q %q; want it whole", r.code, r.out, r.errOut)
				}
			case <-time.After(4 * time.Minute):
				t.Fatal("the guest's write did not end after room was made")
			}
			t.Logf("the paused guest's write done %v after room was made", time.Since(freed).Round(100*time.Millisecond))
		})
	}
}

// fillScript fills the file system of $1 with the file $1/e2e-filler,
// leaving $2 bytes (about) free, and prints what is free then.
const fillScript = `
root=$1 leave=$2 f=$1/e2e-filler
rm -f "$f"
want=$(( $(df --output=avail -B1 "$root" | tail -n 1) - leave ))
if [ "$want" -gt 0 ]; then
  fallocate -l "$want" "$f" 2>/dev/null || fallocate -l $((want - 1048576)) "$f" || exit 1
fi
if [ "$leave" -eq 0 ]; then
  # What the file system keeps for its own blocks: in small steps, bounded.
  for step in 65536 4096; do
    i=0
    while [ $i -lt 1024 ] && fallocate -o "$(stat -c %s "$f")" -l $step "$f" 2>/dev/null; do i=$((i + 1)); done
  done
fi
df --output=avail -B1 "$root" | tail -n 1
`

// fill fills the node's state root but leave bytes, until unfill or the
// test's end.
func (n *testNode) fill(t *testing.T, leave int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := n.run(ctx, fillScript, n.stateRoot, strconv.Itoa(leave))
	t.Cleanup(func() { n.unfill(t) })
	if err != nil {
		t.Fatalf("fill %s: %v", n.stateRoot, err)
	}
	t.Logf("%s filled: %s bytes free", n.stateRoot, strings.TrimSpace(out))
}

// unfill removes fill's file and returns when.
func (n *testNode) unfill(t *testing.T) time.Time {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := n.run(ctx, `rm -f "$1/e2e-filler"`, n.stateRoot); err != nil {
		t.Errorf("free %s: %v", n.stateRoot, err)
	}
	return time.Now()
}
