//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

const (
	// namespace holds every pod the tests make. It is never deleted: a
	// cluster without kube-controller-manager (hack/local-up.sh's) cannot
	// finish deleting a namespace.
	namespace = "vmpod-e2e"
	// defaultImage is hack/guest/build.sh's containerdisk.
	defaultImage = "localhost/vmpod/test-guest:v1"
)

var (
	client kubernetes.Interface
	image  = defaultImage
	// node is the node the tests' VM pods run on, through containerd and
	// the shim.
	node = &testNode{stateRoot: "/var/lib/vmpod"}
	// criNode is the VM-only node whose kubelet talks to vm-runtime cri;
	// nil: the cluster has none.
	criNode *testNode
)

// testNode is a node as the tests reach it from the host.
type testNode struct {
	name string // "" for the tests' node, which the scheduler picks
	exec []string
	// stateRoot is the shims' VMPOD_STATE_ROOT, or vm-runtime cri's
	// --state-root.
	stateRoot string
	// cgroupRoot is the kubelet's cgroupRoot, "" for any.
	cgroupRoot string
	// netnsDir is where vm-runtime cri mounts pod network namespaces, ""
	// for containerd's (cni-<id>).
	netnsDir string
	// dirs hold entries that must not outlive a pod, besides those
	// leftoverScript knows (vm-runtime cri's checkpoints, for instance).
	dirs []string
	// metricsURL is where, on the node, vm-runtime serves its metrics
	// (VMPOD_E2E_CRI_METRICS_URL); "" for none.
	metricsURL string
}

func TestMain(m *testing.M) {
	if err := setup(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	before, beforeItems, err := node.leftovers()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: what the node has before the tests:", err)
		os.Exit(1)
	}
	fmt.Printf("e2e: the node before the tests: %s\n", before)
	code := m.Run()
	// After all tests, passed or failed (each deletes its pods at
	// cleanup), nothing of a VM may be left on the node: see
	// leftoverScript.
	after, err := node.waitLeftovers(before, beforeItems, time.Minute)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: FAIL: left on the node after the tests:", err)
		fmt.Fprintf(os.Stderr, "before: %s\nafter:  %s\n", before, after)
		code = 1
	} else {
		fmt.Printf("e2e: nothing left on the node: as before the tests, %s\n", after)
	}
	os.Exit(code)
}

func setup() error {
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(clientcmd.NewDefaultClientConfigLoadingRules(), nil).ClientConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig (a running cluster is needed: make e2e starts one): %w", err)
	}
	cfg.QPS, cfg.Burst = 50, 100 // the tests poll pods and logs
	if client, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	if v := os.Getenv("VMPOD_E2E_IMAGE"); v != "" {
		image = v
	}
	if v := os.Getenv("VMPOD_E2E_STATE_ROOT"); v != "" {
		node.stateRoot = v
	}
	node.metricsURL = os.Getenv("VMPOD_E2E_METRICS_URL")
	node.cgroupRoot = strings.TrimSuffix(os.Getenv("VMPOD_E2E_CGROUP_ROOT"), "/")
	// The leftover check runs on the node: it is not optional.
	if node.exec = strings.Fields(os.Getenv("VMPOD_E2E_NODE_EXEC")); len(node.exec) == 0 {
		return fmt.Errorf("VMPOD_E2E_NODE_EXEC is not set: a command prefix that runs a command on the node (after hack/local-up.sh: source _output/local/env)")
	}
	if name := os.Getenv("VMPOD_E2E_CRI_NODE"); name != "" {
		state := os.Getenv("VMPOD_E2E_CRI_STATE_ROOT")
		criNode = &testNode{name: name, exec: strings.Fields(os.Getenv("VMPOD_E2E_CRI_NODE_EXEC")), stateRoot: state,
			metricsURL: os.Getenv("VMPOD_E2E_CRI_METRICS_URL"),
			cgroupRoot: strings.TrimSuffix(os.Getenv("VMPOD_E2E_CRI_CGROUP_ROOT"), "/"),
			netnsDir:   strings.TrimSuffix(os.Getenv("VMPOD_E2E_CRI_NETNS_DIR"), "/"),
			// vm-runtime cri's checkpoints (the VMs' under vms/),
			// QEMU uid leases and libvirt's domain definitions
			// (test/cri's list).
			dirs: []string{state + "/cri/sandboxes", state + "/cri/containers", state + "/vms", state + "/uids",
				state + "/libvirt/etc/libvirt/qemu"}}
		if len(criNode.exec) == 0 || state == "" || criNode.netnsDir == "" {
			return fmt.Errorf("VMPOD_E2E_CRI_NODE is set, VMPOD_E2E_CRI_NODE_EXEC, VMPOD_E2E_CRI_STATE_ROOT or VMPOD_E2E_CRI_NETNS_DIR is not")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("namespace %s: %w", namespace, err)
	}
	return nil
}

// run runs a bash script with arguments on the node through its command
// prefix (VMPOD_E2E_NODE_EXEC) and returns its standard output.
func (n *testNode) run(ctx context.Context, script string, args ...string) (string, error) {
	args = append(append(append([]string{}, n.exec[1:]...), "bash", "-c", script, "e2e"), args...)
	cmd := exec.CommandContext(ctx, n.exec[0], args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("on the node: %v: %s%s", err, out, stderr.String())
	}
	return string(out), nil
}

// leftoverScript counts, on the node, everything a VM pod has while it
// runs and must not have after it was deleted; the counts before and after
// the tests must be equal. Processes: vmpod shims (in the node's mount
// namespace: a local node shares /proc with the host), QEMU processes with
// a pod state dir on their command line, the tasks in the kubelet's
// kubepods cgroups. Cgroups: every pod cgroup and every directory below
// one (the container's, libvirt's), in every hierarchy (cgroupfs or systemd
// driver, v1 or v2). Network: CNI pod network namespaces, and the taps in
// them and in the node's. Mounts: all of the node's mount namespace, and
// among them container rootfs mounts. Files: pod state dirs of the shims
// (or vm-runtime cri) and the kubelet's pod dirs, and the entries of the
// dirs named after the first three arguments (state root, cgroup root,
// netns dir). After the counts it lists what it counted, one item a line,
// to name what differs.
const leftoverScript = `
state=$1 root=$2 nsdir=$3
shift 3
self=$(readlink /proc/self/ns/mnt)
shims=0 qemu=0
for d in /proc/[0-9]*; do
  # By argv: this script's own command line names both programs. A shim
  # runs as containerd-shim-vmpod-v2, or as "vm-runtime shim" once it has
  # re-executed itself. A process may exit between the glob and the read.
  mapfile -d '' -t argv 2>/dev/null <"$d/cmdline" || continue
  case "${argv[0]##*/} ${argv[1]:-}" in
  "containerd-shim-vmpod-v2 "* | "vm-runtime shim")
    [ "$(readlink "$d/ns/mnt")" = "$self" ] && shims=$((shims + 1)) ;;
  qemu-system-*)
    case " ${argv[*]} " in *"$state/pods/"*) qemu=$((qemu + 1)) ;; esac ;;
  esac
done
cgroups=0 tasks=0
# Below the kubelet's cgroupRoot ($root: hack/local-up.sh's node shares the
# host's cgroups with other clusters' kubelets), or anywhere on the node.
mapfile -t kubepods < <(find /sys/fs/cgroup -mindepth 1 -maxdepth 5 -type d -path "*$root/*kubepods*" -prune 2>/dev/null)
# Pod cgroups and all below them: pod<uid> (cgroupfs) or
# kubepods-<qos>-pod<uid>.slice (systemd), not the QoS cgroups the kubelet
# may make when it first needs them.
podcgroups() {
  [ ${#kubepods[@]} -gt 0 ] || return 0
  find "${kubepods[@]}" -mindepth 1 -type d 2>/dev/null | grep -E '/([^/]*-)?pod[0-9a-f]{8}[-_]' || true
}
if [ ${#kubepods[@]} -gt 0 ]; then
  cgroups=$(podcgroups | wc -l)
  tasks=$(find "${kubepods[@]}" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u | wc -l)
fi
netns=0 taps=$(ip -o link show type tun 2>/dev/null | wc -l)
# containerd's (cni-<id>), or those under vm-runtime cri's --netns-dir.
for ns in $(awk -v d="$nsdir" '$5 ~ /\/netns\/cni-/ || (d != "" && index($5, d "/") == 1) { print $5 }' /proc/self/mountinfo | sort -u); do
  netns=$((netns + 1))
  taps=$((taps + $(nsenter --net="$ns" ip -o link show type tun 2>/dev/null | wc -l)))
done
mounts=$(wc -l </proc/self/mountinfo)
rootfs=$(grep -c 'io.containerd.runtime.v2.task/k8s.io/.*/rootfs ' /proc/self/mountinfo || true)
dirs=$(ls "$state/pods" 2>/dev/null | wc -l)
poddirs=$(ls /var/lib/kubelet/pods 2>/dev/null | wc -l)
# The uid leases' lock is the node's, not a pod's.
entries() { for d in "$@"; do ls -A "$d" 2>/dev/null | grep -vx '[.]lock' | sed "s|^|$d/|"; done; }
more=$(entries "$@" | wc -l)
echo "shims=$shims qemu=$qemu tasks=$tasks cgroups=$cgroups netns=$netns taps=$taps mounts=$mounts rootfs=$rootfs statedirs=$dirs kubelet-poddirs=$poddirs entries=$more"
# What was counted, one per line, to show what differs.
podcgroups | sed 's/^/cgroup /'
awk '{ print "mount", $5 }' /proc/self/mountinfo
ls "$state/pods" 2>/dev/null | sed 's/^/statedir /'
ls /var/lib/kubelet/pods 2>/dev/null | sed 's/^/kubelet-poddir /'
entries "$@" | sed 's/^/entry /'
`

// leftovers returns the counts of leftoverScript on the node and what it
// counted.
func (n *testNode) leftovers() (string, []string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := n.run(ctx, leftoverScript, append([]string{n.stateRoot, n.cgroupRoot, n.netnsDir}, n.dirs...)...)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return lines[0], lines[1:], err
}

// waitLeftovers waits, bounded, until the node has nothing more than it
// had before the tests: no count above its value before, no item that was
// not there. What went away meanwhile (another program's namespace on a
// shared machine) is no leftover. The error names what differs.
func (n *testNode) waitLeftovers(before string, beforeItems []string, timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	for {
		after, items, err := n.leftovers()
		if err != nil {
			return after, err
		}
		if noMore(after, before) && len(missing(items, beforeItems)) == 0 {
			return after, nil
		}
		if time.Now().After(deadline) {
			return after, fmt.Errorf("the node has %q, had %q before the tests; new: %q; gone: %q",
				after, before, missing(items, beforeItems), missing(beforeItems, items))
		}
		time.Sleep(2 * time.Second)
	}
}

// noMore reports whether no count of after ("name=N ...") is above its
// count in before.
func noMore(after, before string) bool {
	was := map[string]string{}
	for _, f := range strings.Fields(before) {
		k, v, _ := strings.Cut(f, "=")
		was[k] = v
	}
	for _, f := range strings.Fields(after) {
		k, v, _ := strings.Cut(f, "=")
		n, err1 := strconv.Atoi(v)
		m, err2 := strconv.Atoi(was[k])
		if err1 != nil || err2 != nil || n > m {
			return false
		}
	}
	return true
}

// missing lists the items of a that are not in b.
func missing(a, b []string) []string {
	in := map[string]bool{}
	for _, x := range b {
		in[x] = true
	}
	var out []string
	for _, x := range a {
		if !in[x] {
			out = append(out, x)
		}
	}
	return out
}

// qemuStatusScript prints, on the node, the QEMU of domain $2 (under state
// root $1): its /proc status, then "lease <uid>" (the uid leased to its
// pod), "own-mntns yes|no" and "host-passwd yes|no" (whether its root
// shows /etc/passwd).
const qemuStatusScript = `
state=$1 domain=$2
for d in /proc/[0-9]*; do
  mapfile -d '' -t argv 2>/dev/null <"$d/cmdline" || continue
  case "${argv[0]##*/}" in qemu-system-*) ;; *) continue ;; esac
  case " ${argv[*]} " in *" guest=$domain,"*) ;; *) continue ;; esac
  cat "$d/status"
  for f in "$state"/uids/[0-9]*; do
    case " ${argv[*]} " in *"$(cat "$f")/"*) echo "lease ${f##*/}" ;; esac
  done
  if [ "$(readlink "$d/ns/mnt")" != "$(readlink /proc/self/ns/mnt)" ]; then echo "own-mntns yes"; else echo "own-mntns no"; fi
  if [ -e "$d/root/etc/passwd" ]; then echo "host-passwd yes"; else echo "host-passwd no"; fi
  exit 0
done
echo "no QEMU for domain $domain" >&2
exit 1
`
