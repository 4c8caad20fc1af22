//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"
)

// crashScript takes the node down as a power cut does, on the node: with
// its units held down (the file $1 exists: hack/local/restart-always.sh
// does not start them again), every process of the node's is killed at
// once with SIGKILL: the kubelet, the container runtime and vmpod's
// (containerd, vm-runtime daemon or cri, the shims: the programs in $2,
// those in the node's mount namespace), the QEMUs of its state root ($3),
// and every task in its pods' cgroups (below $4/kubepods, or $4/vmpod).
// Then it clears what a reboot clears: the mounts under, and the files
// of, the node's volatile paths ($5...: what it keeps in /run), its pods'
// cgroups. The state dirs stay. It prints what it killed and cleared.
const crashScript = `
hold=$1 progs=" $2 " state=$3 root=$4
shift 4
touch "$hold"
self=$(readlink /proc/self/ns/mnt)
pids=""
for d in /proc/[0-9]*; do
  mapfile -d '' -t argv 2>/dev/null <"$d/cmdline" || continue
  name=${argv[0]##*/}
  case "$progs" in *" $name "* | *" $name:${argv[1]:-} "*) ;; *) name="" ;; esac
  if [ -n "$name" ] && [ "$(readlink "$d/ns/mnt")" = "$self" ]; then
    pids="$pids ${d#/proc/}"
    continue
  fi
  case "${argv[0]##*/}" in qemu-system-*)
    case " ${argv[*]} " in *"$state/pods/"*) pids="$pids ${d#/proc/}" ;; esac ;;
  esac
done
mapfile -t cgs < <(find /sys/fs/cgroup -mindepth 2 -maxdepth 6 -type d \( -path "*$root/kubepods*" -o -path "*$root/vmpod" \) -prune 2>/dev/null)
if [ ${#cgs[@]} -gt 0 ]; then
  pids="$pids $(find "${cgs[@]}" -name cgroup.procs -exec cat {} + 2>/dev/null | tr '\n' ' ')"
fi
pids=$(printf '%s\n' $pids | sort -un | tr '\n' ' ')
kill -KILL $pids 2>/dev/null
echo "killed: $pids"
for i in $(seq 100); do
  alive=""
  for p in $pids; do [ -d "/proc/$p" ] && alive="$alive $p"; done
  [ -z "$alive" ] && break
  sleep 0.1
done
[ -z "$alive" ] || { echo "still alive after SIGKILL:$alive" >&2; exit 1; }
for v in "$@"; do
  awk -v p="$v" '$5 == p || index($5, p "/") == 1 { print $5 }' /proc/self/mountinfo | sort -r | while read -r m; do
    umount -l "$m" && echo "unmounted $m"
  done
  rm -rf "$v" && echo "removed $v"
done
if [ ${#cgs[@]} -gt 0 ]; then
  n=$(find "${cgs[@]}" -depth -type d 2>/dev/null | wc -l)
  find "${cgs[@]}" -depth -type d -exec rmdir {} + 2>/dev/null
  echo "removed $n cgroups, $(find "${cgs[@]}" -type d 2>/dev/null | wc -l) left"
fi
`

// TestNodeReboot (issue 28, item 12), on both kinds of node: with the VM
// pods of a Deployment running, the node goes down as in a power cut and
// comes back (crashScript; the state dirs stay, what lives in /run and the
// pods' cgroups and network namespaces do not), and its units start again.
// The pods come back by their restart policy: the same pods, each with a
// new container that serves (exec, console, HTTP), and nothing from
// before the reboot is left on the node (the leak checker: no stale
// domain, lease, checkpoint, state dir, netns or cgroup).
func TestNodeReboot(t *testing.T) {
	checkLeaks(t)
	const replicas = 3
	for _, d := range frontDoors(t) {
		t.Run(d.name, func(t *testing.T) {
			n := d.node
			if n.downFile == "" || len(n.volatile) == 0 {
				t.Fatal("VMPOD_E2E_NODE_DOWN, VMPOD_E2E_NODE_VOLATILE and their VMPOD_E2E_CRI_ twins are unset: hack/local-up.sh sets them")
			}
			_, sel, scaleToZero := d.vmDeployment(t, "reboot", replicas, nil)
			before := podsOf(t, sel)
			containers := map[string]string{}
			for _, p := range before {
				containers[p.Name] = p.Status.ContainerStatuses[0].ContainerID
			}

			// Down: held until the cleanup at the latest.
			t.Cleanup(func() { n.up(t) })
			progs := "kubelet containerd containerd-shim-vmpod-v2 containerd-shim-runc-v2 vm-runtime:daemon vm-runtime:shim"
			if n == criNode {
				progs = "kubelet vm-runtime:cri"
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			out, err := n.run(ctx, crashScript, append([]string{n.downFile, progs, n.stateRoot, n.cgroupRoot}, n.volatile...)...)
			cancel()
			if err != nil {
				t.Fatalf("node down: %v", err)
			}
			t.Logf("node down:\n%s", strings.TrimSpace(out))
			time.Sleep(3 * time.Second) // down a while, as a reboot is
			up := n.up(t)

			// Back: the same pods, each with a new container, Ready.
			if !poll(2*bootTimeout, func() bool {
				pods := podsOf(t, sel)
				if len(pods) != replicas {
					return false
				}
				for _, p := range pods {
					cs := p.Status.ContainerStatuses
					if containers[p.Name] == "" || len(cs) == 0 || !cs[0].Ready || cs[0].ContainerID == containers[p.Name] {
						return false
					}
				}
				return true
			}) {
				for _, p := range podsOf(t, sel) {
					t.Logf("pod %s (was there before: %v):\n%s", p.Name, containers[p.Name] != "", describe(p.Name))
				}
				t.Fatalf("the Deployment's pods are not the same pods with new Ready containers %v after the node came back", 2*bootTimeout)
			}
			t.Logf("all %d VM pods Ready again %v after the node's units started", replicas, time.Since(up).Round(100*time.Millisecond))
			for _, p := range podsOf(t, sel) {
				cs := p.Status.ContainerStatuses[0]
				t.Logf("pod %s: restarts %d; %s", p.Name, cs.RestartCount, lastTermination(cs))
				d.checkServes(t, p.Name, "after the reboot")
				if body := n.httpGet(t, p.Status.PodIP); !strings.Contains(body, "vmpod-guest") {
					t.Errorf("pod %s: HTTP from the guest after the reboot = %q", p.Name, body)
				}
			}
			scaleToZero()
		})
	}
}

// up lets the node's units start again (crashScript held them) and
// returns when.
func (n *testNode) up(t *testing.T) time.Time {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := n.run(ctx, `rm -f "$1"`, n.downFile); err != nil {
		t.Errorf("node up: %v", err)
	}
	return time.Now()
}
