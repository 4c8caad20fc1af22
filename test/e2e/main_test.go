//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
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
	// downFile, while it exists, holds the node's units down
	// (hack/local/restart-always.sh's RESTART_ALWAYS_HOLD); volatile are
	// the paths where the node keeps what a reboot clears (its /run).
	downFile string
	volatile []string
}

func TestMain(m *testing.M) {
	if err := setup(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	type snap struct {
		counts string
		items  []string
	}
	before := map[*testNode]snap{}
	for _, n := range nodes() {
		c, items, err := n.leftovers()
		if err != nil {
			fmt.Fprintf(os.Stderr, "e2e: what %s has before the tests: %v\n", n, err)
			os.Exit(1)
		}
		before[n] = snap{c, items}
		fmt.Printf("e2e: %s before the tests: %s\n", n, c)
	}
	code := m.Run()
	// After all tests, passed or failed (each deletes its pods at
	// cleanup and checks its own leaks), nothing of a VM may be left on a
	// node, and the runtimes' goroutines and fds are back (within slack)
	// to where they were before the first VM: see leftoverScript.
	for _, n := range nodes() {
		after, err := n.waitLeftovers(before[n].counts, before[n].items, time.Minute)
		if err != nil {
			fmt.Fprintf(os.Stderr, "e2e: FAIL: left on %s after the tests: %v\n", n, err)
			code = 1
			continue
		}
		fmt.Printf("e2e: nothing left on %s: as before the tests, %s\n", n, after)
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
	// The runtime's checkpoints of its VMs, QEMU uid leases and
	// libvirt's domain definitions.
	node.dirs = runtimeDirs(node.stateRoot)
	node.cgroupRoot = strings.TrimSuffix(os.Getenv("VMPOD_E2E_CGROUP_ROOT"), "/")
	node.downFile, node.volatile = os.Getenv("VMPOD_E2E_NODE_DOWN"), strings.Fields(os.Getenv("VMPOD_E2E_NODE_VOLATILE"))
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
			downFile:   os.Getenv("VMPOD_E2E_CRI_NODE_DOWN"),
			volatile:   strings.Fields(os.Getenv("VMPOD_E2E_CRI_NODE_VOLATILE")),
			// vm-runtime cri's checkpoints, and the runtime's.
			dirs: append([]string{state + "/cri/sandboxes", state + "/cri/containers"}, runtimeDirs(state)...)}
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

// runtimeDirs are the dirs under a vm-runtime's state root whose entries
// are its VMs': checkpoints, QEMU uid leases, libvirt's domain
// definitions and running domains' status.
func runtimeDirs(state string) []string {
	return []string{state + "/vms", state + "/uids", state + "/libvirt/etc/libvirt/qemu", state + "/libvirt/run/libvirt/qemu"}
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
