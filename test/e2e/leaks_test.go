//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// leftoverScript counts, on the node, everything a VM pod has while it
// runs and must not have after it was deleted; the counts before and after
// a test must be equal. Processes: vmpod shims (in the node's mount
// namespace: a local node shares /proc with the host), QEMU processes with
// a pod state dir on their command line, processes of the jail's uids
// (QEMU, qemu-img; any node's: the block from 0x70000000 holds every
// node's --qemu-uids), virtiofsd processes, the tasks in the kubelet's
// kubepods cgroups. Cgroups: every pod cgroup and every directory below
// one (the container's, libvirt's), in every hierarchy (cgroupfs or systemd
// driver, v1 or v2). Network: CNI pod network namespaces, and the taps and
// ingress qdiscs (the anti-spoofing and DHCP filters hang off them) in them
// and in the node's. Mounts: all of the node's mount namespace, and among
// them container rootfs mounts. Files: pod state dirs of the shims (or
// vm-runtime cri) and the kubelet's pod dirs, and the entries of the dirs
// named after the first four arguments (state root, cgroup root, netns
// dir, metrics URL). The node's vm-runtime: its goroutines (each DHCP
// server, console copier and agent connection is one) and open fds, from
// its metrics ("?" when it does not answer). After the counts it lists what
// it counted, one item a line, to name what differs.
const leftoverScript = `
state=$1 root=$2 nsdir=$3 metrics=$4
shift 4
self=$(readlink /proc/self/ns/mnt)
shims=0 qemu=0 jailed=0 virtiofsd=0
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
  virtiofsd*) virtiofsd=$((virtiofsd + 1)) ;;
  esac
  uid=""
  while read -r k v _; do [ "$k" = Uid: ] && { uid=$v; break; }; done 2>/dev/null <"$d/status"
  [ -n "$uid" ] && [ "$uid" -ge 1879048192 ] && [ "$uid" -le 2147483647 ] && jailed=$((jailed + 1))
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
qdiscs=$(tc qdisc show 2>/dev/null | grep -c ' ingress ' || true)
# containerd's (cni-<id>), or those under vm-runtime cri's --netns-dir.
for ns in $(awk -v d="$nsdir" '$5 ~ /\/netns\/cni-/ || (d != "" && index($5, d "/") == 1) { print $5 }' /proc/self/mountinfo | sort -u); do
  netns=$((netns + 1))
  taps=$((taps + $(nsenter --net="$ns" ip -o link show type tun 2>/dev/null | wc -l)))
  qdiscs=$((qdiscs + $(nsenter --net="$ns" tc qdisc show 2>/dev/null | grep -c ' ingress ' || true)))
done
mounts=$(wc -l </proc/self/mountinfo)
rootfs=$(grep -c 'io.containerd.runtime.v2.task/k8s.io/.*/rootfs ' /proc/self/mountinfo || true)
dirs=$(ls "$state/pods" 2>/dev/null | wc -l)
poddirs=$(ls /var/lib/kubelet/pods 2>/dev/null | wc -l)
# The uid leases' lock is the node's, not a pod's.
entries() { for d in "$@"; do ls -A "$d" 2>/dev/null | grep -vx '[.]lock' | sed "s|^|$d/|"; done; }
more=$(entries "$@" | wc -l)
goroutines="?" fds="?"
if [ -n "$metrics" ]; then
  read -r goroutines fds < <(curl -sSf --max-time 10 "$metrics" 2>/dev/null |
    awk '$1 == "go_goroutines" { g = $2 } $1 == "process_open_fds" { f = $2 } END { print (g == "" ? "?" : g), (f == "" ? "?" : f) }') || true
fi
echo "shims=$shims qemu=$qemu jailed=$jailed virtiofsd=$virtiofsd tasks=$tasks cgroups=$cgroups netns=$netns taps=$taps qdiscs=$qdiscs mounts=$mounts rootfs=$rootfs statedirs=$dirs kubelet-poddirs=$poddirs entries=$more goroutines=${goroutines:-?} fds=${fds:-?}"
# What was counted, one per line, to show what differs.
podcgroups | sed 's/^/cgroup /'
awk '{ print "mount", $5 }' /proc/self/mountinfo
ls "$state/pods" 2>/dev/null | sed 's/^/statedir /'
ls /var/lib/kubelet/pods 2>/dev/null | sed 's/^/kubelet-poddir /'
entries "$@" | sed 's/^/entry /'
`

// slack is how far a count may be above its value before and not be a
// leak: the runtime's goroutines and fds move with what it serves at the
// moment (a metrics scrape, a kubelet's stats call, the first VM's lazily
// opened files). A leak of one per pod shows beyond it in TestStorm's
// waves and in the whole suite's check (TestMain).
var slack = map[string]int{"goroutines": 12, "fds": 8}

// leftovers returns the counts of leftoverScript on the node and what it
// counted.
func (n *testNode) leftovers() (string, []string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := n.run(ctx, leftoverScript, append([]string{n.stateRoot, n.cgroupRoot, n.netnsDir, n.metricsURL}, n.dirs...)...)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return lines[0], lines[1:], err
}

// waitLeftovers waits, bounded, until the node has nothing more than it
// had before: no count above its value before (beyond its slack), no item
// that was not there. What went away meanwhile (another program's
// namespace on a shared machine) is no leftover. The error names what
// differs.
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
			return after, fmt.Errorf("the node has %q, had %q before; new: %q; gone: %q",
				after, before, missing(items, beforeItems), missing(beforeItems, items))
		}
		time.Sleep(2 * time.Second)
	}
}

// noMore reports whether no count of after ("name=N ...") is above its
// count in before by more than its slack. A count that is not a number
// ("?": the runtime did not answer) is never no more.
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
		if err1 != nil || err2 != nil || n > m+slack[k] {
			return false
		}
	}
	return true
}

// idPattern matches what names one instance of a thing: containerd's
// 64-hex-digit container and sandbox ids, and UUIDs (pod uids, CNI
// network namespaces).
var idPattern = regexp.MustCompile(`[0-9a-f]{64}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)

// missing lists the items of a that b has fewer of, each item taken
// with its ids as "<id>": a container or pod network namespace that
// another took the place of (a pod outside the test restarted: CoreDNS
// across TestNodeReboot) is the same item, one more of a kind is new.
func missing(a, b []string) []string {
	in := map[string]int{}
	for _, x := range b {
		in[idPattern.ReplaceAllString(x, "<id>")]++
	}
	var out []string
	for _, x := range a {
		k := idPattern.ReplaceAllString(x, "<id>")
		if in[k] > 0 {
			in[k]--
			continue
		}
		out = append(out, x)
	}
	return out
}

// field is the value of name in leftoverScript's counts ("name=N ...").
func field(counts, name string) string {
	for _, f := range strings.Fields(counts) {
		if k, v, _ := strings.Cut(f, "="); k == name {
			return v
		}
	}
	return "?"
}

// nodes are the cluster's nodes the tests run VMs on.
func nodes() []*testNode {
	if criNode == nil {
		return []*testNode{node}
	}
	return []*testNode{node, criNode}
}

func (n *testNode) String() string {
	if n.name == "" {
		return "the containerd node"
	}
	return "the VM-only node " + n.name
}

// checkLeaks is the leak checker every test runs first (TestLeakChecked
// holds it to that): it takes what leftoverScript counts on each node
// now, and when the test ends, after the test's own cleanups (which delete
// its pods and wait until they are gone), waits until each node is back
// to it. The counts it took are returned, per node, for a test that
// compares its own.
func checkLeaks(t *testing.T) map[*testNode]string {
	t.Helper()
	type snap struct {
		counts string
		items  []string
	}
	snaps := map[*testNode]snap{}
	counts := map[*testNode]string{}
	for _, n := range nodes() {
		c, items, err := n.leftovers()
		if err != nil {
			t.Fatalf("what %s has before the test: %v", n, err)
		}
		snaps[n], counts[n] = snap{c, items}, c
	}
	// Registered first, so it runs after every other cleanup of the test.
	t.Cleanup(func() {
		for _, n := range nodes() {
			s := snaps[n]
			after, err := n.waitLeftovers(s.counts, s.items, time.Minute)
			if err != nil {
				t.Errorf("leak: left on %s after the test: %v", n, err)
				continue
			}
			t.Logf("%s after the test: %s", n, after)
		}
	})
	return counts
}

// TestLeakChecked: every test of the package calls checkLeaks first, so
// the leak checker runs after each.
func TestLeakChecked(t *testing.T) {
	files, err := filepath.Glob("*_test.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("the package's test files: %v %v", files, err)
	}
	fset := token.NewFileSet()
	tests := 0
	for _, f := range files {
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range file.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "Test") || fn.Name.Name == "TestMain" || fn.Name.Name == "TestLeakChecked" {
				continue
			}
			tests++
			if !callsFirst(fn, "checkLeaks") {
				t.Errorf("%s: %s does not call checkLeaks(t) first", fset.Position(fn.Pos()), fn.Name.Name)
			}
		}
	}
	if tests < 10 {
		t.Errorf("found %d tests in %v: the check reads the wrong files", tests, files)
	}
}

// callsFirst reports whether fn's first statement calls name, alone or
// assigned.
func callsFirst(fn *ast.FuncDecl, name string) bool {
	if fn.Body == nil || len(fn.Body.List) == 0 {
		return false
	}
	var call ast.Expr
	switch s := fn.Body.List[0].(type) {
	case *ast.ExprStmt:
		call = s.X
	case *ast.AssignStmt:
		if len(s.Rhs) == 1 {
			call = s.Rhs[0]
		}
	}
	if ix, ok := call.(*ast.IndexExpr); ok { // checkLeaks(t)[node]
		call = ix.X
	}
	c, ok := call.(*ast.CallExpr)
	if !ok {
		return false
	}
	id, ok := c.Fun.(*ast.Ident)
	return ok && id.Name == name
}
