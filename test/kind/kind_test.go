//go:build kind

package kind

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmpod/vmpod/internal/testenv/repo"
	"github.com/vmpod/vmpod/internal/testguest"
)

// cluster is the kind cluster this test makes, named so that it never
// touches a user's "vmpod" cluster.
const cluster = "vmpod-test"

var (
	controlPlane = cluster + "-control-plane"
	worker       = cluster + "-worker"
)

// Images the test loads into the nodes; manifests/kustomization.yaml names
// the first two, hack/kind/build.sh --offline builds them.
const (
	runtimeImage = "localhost/vmpod/vm-runtime:dev"
	busyboxImage = "localhost/vmpod/busybox:v1"
)

// env is what every step needs: the repository, the tools and the
// cluster's kubeconfig.
type env struct {
	repo, kind, kubectl, kubeconfig string
	phases                          *phases
}

func TestKind(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("test/kind needs root (debootstrap, the kind nodes' containerd state)")
	}
	e := &env{repo: repo.Root(t), phases: &phases{}}
	defer e.phases.write(t, filepath.Join(e.repo, "_output", "kind", "phases.txt"))
	guest := testguest.Archive(t)
	t.Setenv("GUEST_ARCHIVE", guest)

	// The images, built offline: the node image with QEMU, vmpod's two
	// images, a busybox for an ordinary pod.
	var nodeImage string
	e.phase(t, "build: hack/kind/build.sh --offline, busybox, kind, kubectl", func() {
		e.kind = e.tool(t, "VMPOD_KIND", "kind", "sigs.k8s.io/kind")
		out := strings.Fields(e.run(t, 40*time.Minute, e.script("build.sh"), "--offline"))
		if len(out) == 0 {
			t.Fatal("hack/kind/build.sh --offline printed no node image")
		}
		nodeImage = out[len(out)-1]
		e.run(t, 5*time.Minute, "go", "run", "./hack/ociimage", "-name", busyboxImage,
			"-o", filepath.Join(e.repo, "_output", "kind", "images", "busybox.oci.tar"),
			"-file", "/bin/busybox=/bin/busybox", "-link", "bin/sh=busybox", "-entrypoint", "/bin/sh")
		e.kubectl = e.kubectlBin(t)
	})

	// The cluster (a leftover of an interrupted run goes first), then
	// hack/kind/up.sh's steps up to the install, with the nodes as kind
	// made them recorded in between.
	e.kubeconfig = filepath.Join(e.repo, "_output", "kind", "kubeconfig."+cluster)
	e.runOK(2*time.Minute, e.kindSh(), "delete", "cluster", "--name", cluster)
	t.Cleanup(func() {
		if os.Getenv("VMPOD_KIND_KEEP") != "" {
			t.Logf("VMPOD_KIND_KEEP: cluster %s kept (KUBECONFIG=%s)", cluster, e.kubeconfig)
			return
		}
		start := time.Now()
		if out, err := e.runOK(3*time.Minute, e.kindSh(), "delete", "cluster", "--name", cluster); err != nil {
			t.Errorf("kind delete cluster: %v: %s", err, out)
		}
		t.Logf("kind delete cluster: %v", time.Since(start).Round(time.Second))
	})
	up := func(steps string) {
		e.run(t, 15*time.Minute, e.script("up.sh"), "--name", cluster, "--image", nodeImage,
			"--kubeconfig", e.kubeconfig, "--steps", steps)
	}
	e.phase(t, "hack/kind/up.sh: create, QEMU on the nodes, load", func() {
		up("create,setup,load")
		e.run(t, 5*time.Minute, e.kindSh(), "load", "image-archive", "--name", cluster,
			filepath.Join(e.repo, "_output", "kind", "images", "busybox.oci.tar"))
	})
	before := map[string]string{}
	for _, n := range []string{controlPlane, worker} {
		before[n] = e.nodeFacts(t, n)
	}
	// docs/install.md's kubectl apply -k manifests/, and the waits.
	e.phase(t, "hack/kind/up.sh: install", func() { up("install") })
	for _, n := range []string{controlPlane, worker} {
		if got := e.node(t, n, "grep -c 'BEGIN vmpod runtime' /etc/containerd/config.toml || true"); strings.TrimSpace(got) != "1" {
			t.Fatalf("%s: the installer's block is in containerd's config %s times, want once", n, strings.TrimSpace(got))
		}
	}
	// The installer starts the node daemon, which runs the VMs, before it
	// restarts containerd.
	for _, n := range []string{controlPlane, worker} {
		e.waitFor(t, n+"'s vm-runtime-daemon active", 2*time.Minute, func() bool {
			return strings.TrimSpace(e.node(t, n, "systemctl is-active vm-runtime-daemon || true")) == "active"
		})
	}
	// The labeller's libvirt probes start QEMUs; none may stay a zombie.
	for _, n := range []string{controlPlane, worker} {
		if z := e.node(t, n, "ps -eo stat=,comm= | awk '$1 ~ /^Z/ && $2 ~ /qemu/' | wc -l"); strings.TrimSpace(z) != "0" {
			t.Errorf("%s: %s zombie QEMU probes (ps -eo stat,comm)", n, strings.TrimSpace(z))
		}
	}
	// Each node says whether guests run under KVM, and when not, why
	// (docs/labels.md): the probe's reason in an annotation.
	for _, n := range []string{controlPlane, worker} {
		kvm := e.kc(t, 30*time.Second, "get", "node", n, "-o", `jsonpath={.metadata.labels.vmpod\.io/kvm}`)
		reason := e.kc(t, 30*time.Second, "get", "node", n, "-o", `jsonpath={.metadata.annotations.vmpod\.io/kvm-reason}`)
		switch {
		case kvm != "true" && kvm != "false":
			t.Errorf("%s: label vmpod.io/kvm=%q, want true or false", n, kvm)
		case kvm == "false" && reason == "":
			t.Errorf("%s: vmpod.io/kvm=false without the annotation vmpod.io/kvm-reason", n)
		}
		t.Logf("%s: vmpod.io/kvm=%s (%s)", n, kvm, reason)
	}

	// A VM Deployment behind a Service, and an ordinary pod on the other
	// node to reach it from.
	e.phase(t, "VM Deployment Available (the guest Ready)", func() {
		e.apply(t, workload)
		e.kc(t, 10*time.Minute, "rollout", "status", "deployment/web", "--timeout", "10m")
		e.kc(t, 5*time.Minute, "wait", "--for=condition=Ready", "pod/client", "pod/neighbour", "--timeout", "5m")
	})
	vm := strings.TrimSpace(e.kc(t, 30*time.Second, "get", "pods", "-l", "app=web", "-o", "jsonpath={.items[0].metadata.name}"))
	if node := e.kc(t, 30*time.Second, "get", "pod", vm, "-o", "jsonpath={.spec.nodeName}"); node != worker {
		t.Fatalf("the VM pod is on %q, want the worker %s (the control plane is tainted)", node, worker)
	}

	e.phase(t, "logs, exec, port-forward, Service by DNS name", func() {
		e.waitFor(t, "the guest's console in kubectl logs", 5*time.Minute, func() bool {
			out, _ := e.kcOK(30*time.Second, "logs", vm)
			return strings.Contains(out, "VMPOD-GUEST: ready")
		})
		if out := e.kc(t, time.Minute, "exec", vm, "--", "cat", "/proc/sys/kernel/hostname"); !strings.Contains(out, "web-") {
			t.Errorf("kubectl exec cat /proc/sys/kernel/hostname in the guest: %q, want the pod's name", out)
		}
		addr := e.portForward(t, vm, "8080")
		body, err := get(addr)
		if err != nil || !strings.Contains(body, "vmpod-guest") {
			t.Errorf("HTTP through kubectl port-forward: %q, %v", body, err)
		}
		// kind's CNI is ptp: a pod on the VM's own node reaches it through
		// the node too (the guest must not take the /24 for on-link).
		ip := e.kc(t, 30*time.Second, "get", "pod", vm, "-o", "jsonpath={.status.podIP}")
		for _, from := range []string{"client", "neighbour"} {
			e.waitFor(t, "the VM's pod IP from "+from, time.Minute, func() bool {
				return strings.Contains(e.httpFrom(from, ip, "8080"), "vmpod-guest")
			})
		}
		e.waitFor(t, "the Service by its DNS name from the control plane's pod", 2*time.Minute, func() bool {
			return strings.Contains(e.httpFrom("client", "web.default.svc.cluster.local", "80"), "vmpod-guest")
		})
	})

	// The installer restarts containerd on an upgrade: a running VM must
	// survive it.
	e.phase(t, "containerd restart on the worker, the VM kept", func() {
		qemu := e.qemuPIDs(t, worker)
		if len(qemu) != 1 {
			t.Fatalf("%d QEMUs on the worker, want 1: %v", len(qemu), qemu)
		}
		e.node(t, worker, "systemctl restart containerd && systemctl is-active containerd")
		// The kubelet relists every second; give it time to see a lost
		// container and act on it.
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			time.Sleep(3 * time.Second)
			st := e.kc(t, 30*time.Second, "get", "pod", vm, "-o",
				"jsonpath={.status.containerStatuses[0].restartCount} {.status.containerStatuses[0].ready}")
			if st != "0 true" {
				t.Fatalf("after containerd's restart the VM pod has restarts/ready %q, want \"0 true\":\n%s", st,
					e.kc(t, 30*time.Second, "describe", "pod", vm))
			}
		}
		if got := e.qemuPIDs(t, worker); len(got) != 1 || got[0] != qemu[0] {
			t.Fatalf("QEMU after containerd's restart: %v, want %v", got, qemu)
		}
		if out := e.kc(t, time.Minute, "exec", vm, "--", "cat", "/proc/sys/kernel/hostname"); !strings.Contains(out, "web-") {
			t.Errorf("kubectl exec after containerd's restart: %q", out)
		}
	})

	e.phase(t, "scale to 0: the VM gone, nothing left on the node", func() {
		e.kc(t, time.Minute, "scale", "deployment/web", "--replicas", "0")
		e.waitFor(t, "the VM pod gone", 3*time.Minute, func() bool {
			out, _ := e.kcOK(30*time.Second, "get", "pods", "-l", "app=web", "-o", "name")
			return strings.TrimSpace(out) == ""
		})
		const none = "qemu=0 shims=0 taps=0 poddirs=0"
		left := ""
		deadline := time.Now().Add(time.Minute)
		for left = strings.TrimSpace(e.node(t, worker, leftovers)); left != none && time.Now().Before(deadline); {
			time.Sleep(2 * time.Second)
			left = strings.TrimSpace(e.node(t, worker, leftovers))
		}
		if left != none {
			t.Fatalf("the worker a minute after its VM pod went: %s, want %s", left, none)
		}
	})

	e.phase(t, "uninstall (docs/install.md), the nodes as kind made them", func() {
		e.kc(t, 2*time.Minute, "delete", "deployment/web", "service/web", "pod/client", "pod/neighbour", "--timeout", "2m")
		e.kc(t, time.Minute, "-n", "vmpod-system", "set", "env", "daemonset/vmpod-installer", "VMPOD_RUN_MODE=uninstall")
		e.kc(t, 5*time.Minute, "-n", "vmpod-system", "rollout", "status", "daemonset/vmpod-installer", "--timeout", "5m")
		e.kc(t, 5*time.Minute, "delete", "-k", "manifests/", "--timeout", "5m")
	})
	for _, n := range []string{controlPlane, worker} {
		if after := e.nodeFacts(t, n); after != before[n] {
			t.Errorf("%s after uninstall:\n%s\nbefore install:\n%s", n, after, before[n])
		}
	}
}

// workload is the Deployment, Service and client pod the test applies.
const workload = `
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 1
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      runtimeClassName: vmpod
      schedulerName: vmpod-scheduler
      containers:
      - name: vm
        image: localhost/vmpod/test-guest:v1
        imagePullPolicy: Never
        resources:
          limits: {cpu: "1", memory: 256Mi}
        ports:
        - containerPort: 8080
        readinessProbe:
          httpGet: {path: /, port: 8080}
          periodSeconds: 2
---
apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  selector: {app: web}
  ports:
  - port: 80
    targetPort: 8080
---
apiVersion: v1
kind: Pod
metadata:
  name: client
spec:
  nodeSelector:
    node-role.kubernetes.io/control-plane: ""
  tolerations:
  - key: node-role.kubernetes.io/control-plane
    operator: Exists
    effect: NoSchedule
  terminationGracePeriodSeconds: 1
  containers:
  - name: sh
    image: localhost/vmpod/busybox:v1
    imagePullPolicy: Never
    command: ["/bin/busybox", "sleep", "3600"]
---
apiVersion: v1
kind: Pod
metadata:
  name: neighbour
spec:
  nodeSelector:
    kubernetes.io/hostname: vmpod-test-worker
  terminationGracePeriodSeconds: 1
  containers:
  - name: sh
    image: localhost/vmpod/busybox:v1
    imagePullPolicy: Never
    command: ["/bin/busybox", "sleep", "3600"]
`

// leftovers counts on a node what a VM pod leaves while it runs: QEMUs,
// vmpod shims, tap devices in any network namespace, pod state dirs.
const leftovers = `
qemu=0 shims=0
for d in /proc/[0-9]*; do
  mapfile -d '' -t argv 2>/dev/null <"$d/cmdline" || continue
  case "${argv[0]##*/} ${argv[1]:-}" in
  "containerd-shim-vmpod-v2 "* | "vm-runtime shim") shims=$((shims + 1)) ;;
  qemu-system-*) qemu=$((qemu + 1)) ;;
  esac
done
taps=$(ip -o link show type tun | wc -l)
for ns in /var/run/netns/*; do
  [ -e "$ns" ] || continue
  taps=$((taps + $(nsenter --net="$ns" ip -o link show type tun 2>/dev/null | wc -l)))
done
echo "qemu=$qemu shims=$shims taps=$taps poddirs=$(ls /var/lib/vmpod/pods 2>/dev/null | wc -l)"
`

// nodeFacts is what uninstall must give back as it was: containerd's
// config, byte for byte, what is in /opt, containerd running, and no
// vm-runtime-daemon unit, running or not.
func (e *env) nodeFacts(t *testing.T, node string) string {
	return e.node(t, node, "sha256sum /etc/containerd/config.toml; ls -A /opt; systemctl is-active containerd; "+
		"echo vm-runtime-daemon $(systemctl is-active vm-runtime-daemon) $(ls /etc/systemd/system | grep -c vm-runtime-daemon)")
}

// qemuPIDs lists the VMs' QEMU processes of a node (not the labeller's
// capability probes).
func (e *env) qemuPIDs(t *testing.T, node string) []string {
	out, _ := e.runOK(30*time.Second, "docker", "exec", node, "pgrep", "-f", "qemu-system-x86_64 -name guest=")
	return strings.Fields(out)
}

// httpFrom sends an HTTP/1.0 GET from a busybox pod to host:port with
// busybox's nc (its wget crashes without NSS in this static image) and
// returns what came back, bounded.
func (e *env) httpFrom(pod, host, port string) string {
	out, _ := e.kcOK(30*time.Second, "exec", pod, "--", "/bin/busybox", "sh", "-c",
		`printf 'GET / HTTP/1.0\r\n\r\n' | timeout 10 nc "$1" "$2"`, "sh", host, port)
	return out
}

// node runs a bash script in a kind node.
func (e *env) node(t *testing.T, node, script string) string {
	t.Helper()
	return e.run(t, time.Minute, "docker", "exec", node, "bash", "-c", script)
}

// apply applies manifests from a string.
func (e *env) apply(t *testing.T, manifests string) {
	t.Helper()
	cmd := e.kubectlCmd(context.Background(), "apply", "-f", "-")
	cmd.Stdin = strings.NewReader(manifests)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply: %v: %s", err, out)
	}
}

// kc runs kubectl against the cluster and fails the test if it fails.
func (e *env) kc(t *testing.T, timeout time.Duration, args ...string) string {
	t.Helper()
	out, err := e.kcOK(timeout, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// kcOK runs kubectl and returns its stdout (and stderr, on failure).
func (e *env) kcOK(timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := e.kubectlCmd(ctx, args...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String() + stderr.String(), err
	}
	return stdout.String(), nil
}

func (e *env) kubectlCmd(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, e.kubectl, append([]string{"--kubeconfig", e.kubeconfig}, args...)...)
	cmd.Dir = e.repo
	return cmd
}

// portForward starts kubectl port-forward to the pod's port and returns
// the local address; kubectl is stopped at cleanup.
func (e *env) portForward(t *testing.T, pod, port string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := e.kubectlCmd(ctx, "port-forward", "pod/"+pod, ":"+port)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); cmd.Wait() })
	re := regexp.MustCompile(`^Forwarding from (127\.0\.0\.1:\d+) -> ` + port + `$`)
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			}
		}
	}()
	select {
	case addr := <-found:
		return addr
	case <-time.After(time.Minute):
		cancel()
		t.Fatalf("kubectl port-forward %s %s: no local port within a minute: %s", pod, port, stderr.String())
		return ""
	}
}

// get sends an HTTP/1.0 GET to addr and returns the answer (bounded).
func get(addr string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(c, "GET / HTTP/1.0\r\n\r\n"); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	return string(b), err
}

func (e *env) script(name string) string { return filepath.Join(e.repo, "hack", "kind", name) }
func (e *env) kindSh() string            { return e.script("kind.sh") }

// tool is $envVar, else the tool built from go.mod's version of module
// into _output/kind/tools (kind.sh finds kind there).
func (e *env) tool(t *testing.T, envVar, name, module string) string {
	t.Helper()
	if p := os.Getenv(envVar); p != "" {
		return p
	}
	tools := filepath.Join(e.repo, "_output", "kind", "tools")
	p := filepath.Join(tools, name)
	if _, err := os.Stat(p); err == nil {
		return p
	}
	version := strings.TrimSpace(e.run(t, time.Minute, "go", "list", "-m", "-f", "{{.Version}}", module))
	cmd := exec.Command("go", "install", module+"@"+version)
	cmd.Dir = e.repo
	cmd.Env = append(os.Environ(), "GOBIN="+tools)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go install %s@%s: %v\n%s", module, version, err, out)
	}
	return p
}

// kubectlBin is $VMPOD_KUBECTL, else the kubectl hack/local-up.sh or
// hack/kind/images.sh built.
func (e *env) kubectlBin(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("VMPOD_KUBECTL"); p != "" {
		return p
	}
	for _, p := range []string{filepath.Join(e.repo, "_output", "bin", "kubectl"), filepath.Join(e.repo, "_output", "kind", "k8s", "kubectl")} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Fatal("no kubectl: set VMPOD_KUBECTL, or run hack/kind/images.sh, which builds it")
	return ""
}

// run runs a command in the repo, bounded, with its stderr shown as it
// comes (the scripts log their progress there), and returns its stdout.
func (e *env) run(t *testing.T, timeout time.Duration, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = e.repo
	var stdout strings.Builder
	cmd.Stdout = &stdout
	cmd.Stderr = &logWriter{t: t, phases: e.phases}
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.kubeconfig)
	if e.kubectl != "" {
		cmd.Env = append(cmd.Env, "KUBECTL="+e.kubectl)
	}
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, stdout.String())
	}
	return stdout.String()
}

// runOK is run without failing the test.
func (e *env) runOK(timeout time.Duration, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = e.repo
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// waitFor polls cond every 2 s until it holds, failing the test after
// timeout.
func (e *env) waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, timeout)
		}
		time.Sleep(2 * time.Second)
	}
}

// phase runs one timed step of the test.
func (e *env) phase(t *testing.T, name string, f func()) {
	t.Helper()
	t.Logf("== %s", name)
	start := time.Now()
	i := e.phases.add(name, 0) // ahead of the steps the scripts log inside it
	f()
	d := time.Since(start).Round(time.Second)
	t.Logf("== %s: %v", name, d)
	e.phases.set(i, name, d)
}

// phases are the timed steps, written out for the closing note and
// docs.
type phases struct {
	mu    sync.Mutex
	lines []string
}

// add appends a line and returns its index.
func (p *phases) add(name string, d time.Duration) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lines = append(p.lines, phaseLine(name, d))
	return len(p.lines) - 1
}

func (p *phases) set(i int, name string, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lines[i] = phaseLine(name, d)
}

func phaseLine(name string, d time.Duration) string {
	return fmt.Sprintf("%-62s %6s", name, strconv.Itoa(int(d.Seconds()))+" s")
}

func (p *phases) write(t *testing.T, path string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	text := strings.Join(p.lines, "\n") + "\n"
	t.Logf("phases:\n%s", text)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Logf("phases: %v", err)
	}
}

// logWriter sends a command's stderr to the test log, a line at a time,
// and adds the steps the scripts time ("kind/up: LABEL: N s") to phases.
type logWriter struct {
	t      *testing.T
	phases *phases
	buf    []byte
}

var scriptStep = regexp.MustCompile(`^(kind/[a-z]+: .*): ([0-9]+) s$`)

func (w *logWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := strings.IndexByte(string(w.buf), '\n')
		if i < 0 {
			return len(p), nil
		}
		line := string(w.buf[:i])
		w.t.Log(line)
		if m := scriptStep.FindStringSubmatch(line); m != nil && w.phases != nil {
			n, _ := strconv.Atoi(m[2])
			w.phases.add("  "+m[1], time.Duration(n)*time.Second)
		}
		w.buf = w.buf[i+1:]
	}
}
