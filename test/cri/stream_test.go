package cri_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"
)

// crictlCmd is crictl with argv, run in the node's network namespace: the
// streaming server's URLs name the loopback of the namespace the server
// runs in, as a kubelet beside it would reach them.
func (n *node) crictlCmd(ctx context.Context, argv ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "nsenter", append([]string{"--net=" + n.nsPath, n.crictl}, argv...)...)
}

// crictlArgs are crictl's global flags for this node, then args.
func (n *node) crictlArgs(args ...string) []string {
	return append([]string{"--config", filepath.Join(n.dir, "crictl.yaml"),
		"--runtime-endpoint", "unix://" + n.socket, "--image-endpoint", "unix://" + n.socket, "--timeout", "3m"}, args...)
}

// crictlIO runs crictl with stdin and returns its stdout and stderr apart.
func (n *node) crictlIO(stdin string, args ...string) (stdout, stderr string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := n.crictlCmd(ctx, n.crictlArgs(args...)...)
	var o, e bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(stdin), &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

// background starts crictl with args and returns its stdout as it
// comes; it is killed (by its pid) when the test ends.
func (n *node) background(args ...string) (*exec.Cmd, *lines) {
	t := n.t
	cmd := n.crictlCmd(context.Background(), n.crictlArgs(args...)...)
	out := &lines{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	return cmd, out
}

// lines is a process's output, to wait on.
type lines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// waitFor waits up to timeout for re to match; the submatches, or nil.
func (l *lines) waitFor(re *regexp.Regexp, timeout time.Duration) []string {
	deadline := time.Now().Add(timeout)
	for {
		if m := re.FindStringSubmatch(l.String()); m != nil {
			return m
		}
		if time.Now().After(deadline) {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkExecSync: crictl exec -s runs a command through the guest agent
// and returns its output and exit code; a timeout ends it.
func (n *node) checkExecSync(id string) {
	t := n.t
	for i := range 3 {
		start := time.Now()
		out := n.must("exec", "-s", id, "echo", "hello-exec")
		t.Logf("crictl exec -s %d: %v round trip (crictl's own start included)", i, time.Since(start).Round(time.Millisecond))
		if !strings.Contains(out, "hello-exec") {
			t.Errorf("crictl exec -s echo hello-exec: %q", out)
		}
	}
	if out := n.must("exec", "-s", id, "cat", "/proc/sys/kernel/hostname"); !strings.Contains(out, "guest") {
		t.Errorf("the guest's hostname through exec -s: %q, want guest", out)
	}
	_, err := n.crictlRun(time.Minute, "exec", "-s", id, "sh", "-c", "echo oops >&2; exit 3")
	if err == nil || !strings.Contains(err.Error(), "exited with 3") || !strings.Contains(err.Error(), "oops") {
		t.Errorf("crictl exec -s of a command that exits 3: %v, want exited with 3 and its stderr", err)
	}
	_, err = n.crictlRun(time.Minute, "exec", "-s", id, "no-such-program")
	if err == nil || !strings.Contains(err.Error(), "exited with 127") {
		t.Errorf("crictl exec -s of a missing program: %v, want exit 127", err)
	}
	// The timed-out command is killed in the guest with the sleeps it
	// started: pgrep (which leaves itself out) finds none of them and
	// exits 1.
	_, err = n.crictlRun(time.Minute, "exec", "-s", "--timeout", "2", id, "sh", "-c", "sleep 120 & sleep 123 & wait")
	if err == nil || !strings.Contains(err.Error(), "DeadlineExceeded") || !strings.Contains(err.Error(), "killed") {
		t.Errorf("crictl exec -s --timeout 2 sh -c 'sleep 120 & sleep 123 & wait': %v, want DeadlineExceeded and the command killed", err)
	}
	if _, err := n.crictlRun(time.Minute, "exec", "-s", id, "pgrep", "-f", "sleep 12[03]"); err == nil || !strings.Contains(err.Error(), "exited with 1") {
		t.Errorf("pgrep -f 'sleep 12[03]' after the exec timed out: %v, want exit 1 (no such process)", err)
	}
}

// checkExec: crictl exec through the streaming server: stdin, stdout,
// stderr and the exit code; a terminal is refused with the reason.
func (n *node) checkExec(id string) {
	t := n.t
	start := time.Now()
	stdout, stderr, err := n.crictlIO("", "exec", id, "sh", "-c", "echo out; echo err >&2; exit 3")
	t.Logf("crictl exec (streaming): %v round trip", time.Since(start).Round(time.Millisecond))
	if strings.TrimSpace(stdout) != "out" || !strings.Contains(stderr, "err") || !strings.Contains(stderr, "exit code 3") || err == nil {
		t.Errorf("crictl exec sh -c 'echo out; echo err >&2; exit 3': stdout %q, stderr %q, %v; want out, err and exit code 3", stdout, stderr, err)
	}
	stdout, stderr, err = n.crictlIO("piped into the guest\n", "exec", "-i", id, "cat")
	if err != nil || stdout != "piped into the guest\n" {
		t.Errorf("crictl exec -i cat: %q, %v (stderr %q)", stdout, err, stderr)
	}
	_, stderr, err = n.crictlIO("", "exec", "-it", id, "sh")
	if err == nil || !strings.Contains(stderr, "without a TTY") {
		t.Errorf("crictl exec -it: %v, stderr %q; want a refusal saying the agent has no TTY", err, stderr)
	}
}

// sessionsPerPod is TestCrictlVMPod's --max-sessions-per-pod.
const sessionsPerPod = 6

// checkSessions: a pod's execs are bounded (--max-sessions-per-pod): with
// sessionsPerPod streamed execs running, one more is refused with a
// message naming the flag. Clients that go away (crictl killed) end their
// sessions, and their commands in the guest are killed with them.
func (n *node) checkSessions(id string) {
	t := n.t
	var clients []*exec.Cmd
	for i := range sessionsPerPod {
		// Each says on the serial console that it runs: the test waits
		// for that in the log without an exec of its own.
		cmd, _ := n.background("exec", id, "sh", "-c", fmt.Sprintf("echo VMPOD-SESSION-%d >/dev/console; exec sleep 600", i))
		clients = append(clients, cmd)
		n.waitLogs(id, fmt.Sprintf("VMPOD-SESSION-%d", i), 2*time.Minute)
	}
	_, stderr, err := n.crictlIO("", "exec", "-s", id, "true")
	if err == nil || !strings.Contains(stderr, "--max-sessions-per-pod") {
		t.Errorf("with %d execs running in the pod, another one: %v, stderr %q; want a refusal naming --max-sessions-per-pod",
			sessionsPerPod, err, stderr)
	}
	for _, c := range clients {
		c.Process.Kill()
		c.Wait()
	}
	// The server ends each session as its connection closes, and the
	// guest's sleep with it.
	countSleeps := `n=0; for c in /proc/[0-9]*/comm; do [ "$(cat $c 2>/dev/null)" = sleep ] && n=$((n+1)); done; echo $n`
	deadline := time.Now().Add(2 * time.Minute)
	for {
		out, err := n.crictlRun(time.Minute, "exec", "-s", id, "sh", "-c", countSleeps)
		if err == nil && strings.TrimSpace(out) == "0" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after their clients went: %q sleeps in the guest, %v; want 0 (sessions ended, commands killed)", strings.TrimSpace(out), err)
		}
		time.Sleep(time.Second)
	}
}

// checkAttach: crictl attach -i (no terminal) shows what the guest writes
// on its serial console from then on, and what it types goes to the
// console (the guest's tty echoes it: init holds /dev/console open).
func (n *node) checkAttach(id string) {
	t := n.t
	cmd := n.crictlCmd(context.Background(), n.crictlArgs("attach", "-i", id)...)
	out := &lines{}
	cmd.Stdout, cmd.Stderr = out, out
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		cmd.Process.Kill()
		cmd.Wait()
	}()
	// The attach is ready at some point after crictl starts: write until
	// one line comes through (bounded).
	var got []string
	for i := 0; i < 20 && got == nil; i++ {
		n.must("exec", "-s", id, "sh", "-c", fmt.Sprintf("echo VMPOD-ATTACH-%d >/dev/console", i))
		got = out.waitFor(regexp.MustCompile(`VMPOD-ATTACH-\d+`), 3*time.Second)
	}
	if got == nil {
		t.Errorf("crictl attach showed no console line the guest wrote:\n%s", out.String())
		return
	}
	if _, err := io.WriteString(stdin, "VMPOD-TYPED\n"); err != nil {
		t.Fatal(err)
	}
	if out.waitFor(regexp.MustCompile(`VMPOD-TYPED`), 30*time.Second) == nil {
		t.Errorf("what crictl attach -i typed did not reach the console (no echo):\n%s", out.String())
	}
}

// checkPortForward: two crictl port-forwards at once, to the guest's HTTP
// servers on 8080 and 80 (hack/guest/rootfs/init), three streams through
// each open together, all answered by the guest; a forward to a port the
// guest does not listen on (81) ends with the server's error for the
// port, not a hang.
func (n *node) checkPortForward(podID string) {
	t := n.t
	listen := func(remote int) (*exec.Cmd, *lines, string) {
		cmd, out := n.background("port-forward", podID, fmt.Sprintf(":%d", remote))
		m := out.waitFor(regexp.MustCompile(fmt.Sprintf(`Forwarding from 127\.0\.0\.1:(\d+) -> %d`, remote)), time.Minute)
		if m == nil {
			t.Fatalf("crictl port-forward :%d did not start:\n%s", remote, out.String())
		}
		return cmd, out, "127.0.0.1:" + m[1]
	}
	get := func(conn net.Conn) (string, error) {
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(2 * time.Minute)) // a hang fails, not stalls
		if _, err := io.WriteString(conn, "GET / HTTP/1.0\r\n\r\n"); err != nil {
			return "", err
		}
		reply, err := io.ReadAll(io.LimitReader(conn, 64<<10))
		return string(reply), err
	}
	stop := func(cmd *exec.Cmd) {
		cmd.Process.Kill()
		cmd.Wait()
	}

	cmd8080, _, addr8080 := listen(8080)
	defer stop(cmd8080)
	cmd80, _, addr80 := listen(80)
	defer stop(cmd80)
	var conns []net.Conn
	for i := range 6 {
		conns = append(conns, dialIn(t, n.nsPath, []string{addr8080, addr80}[i%2]))
	}
	start := time.Now()
	var wg sync.WaitGroup
	for i, conn := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reply, err := get(conn)
			if err != nil || !strings.HasPrefix(reply, "HTTP/1.0 200 OK") || !strings.Contains(reply, "vmpod-guest") {
				t.Errorf("HTTP GET %d through port-forward to %d: %q, %v; want 200 from the guest", i, []int{8080, 80}[i%2], reply, err)
			}
		}()
	}
	wg.Wait()
	t.Logf("HTTP through crictl port-forward, 6 streams over 2 forwards: %v", time.Since(start).Round(time.Millisecond))

	cmd81, out81, addr81 := listen(81)
	defer stop(cmd81)
	if reply, err := get(dialIn(t, n.nsPath, addr81)); strings.Contains(reply, "vmpod-guest") || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("HTTP GET through port-forward to the closed port 81: %q, %v; want the stream ended", reply, err)
	}
	// The streaming server writes the error on the error stream and then
	// resets both streams (k8s.io/cri-streaming's portForward). A client
	// whose data stream is reset before it has the stream's reply says
	// "Stream reset" and never reads the error: then the server's log
	// has it.
	m := out81.waitFor(regexp.MustCompile(`error forwarding port 81[^\n]*|Error creating forwarding stream[^\n]*Stream reset`), 2*time.Minute)
	switch {
	case m == nil:
		t.Errorf("crictl port-forward to the closed port 81 reported no error:\n%s", out81.String())
	case strings.Contains(m[0], "Stream reset"):
		logs, _ := os.ReadFile(n.logPath)
		refused := regexp.MustCompile(`port-forward to [0-9a-f]+ port 81: dial tcp [^\n]*: connect: connection refused`).Find(logs)
		if refused == nil {
			t.Errorf("crictl port-forward to port 81 saw its stream reset, and the server logged no refusal by the guest:\n%s", logs)
		} else {
			t.Logf("crictl port-forward to port 81: stream reset before the error was read; the server logged: %s", refused)
		}
	default:
		t.Logf("crictl port-forward to port 81 reported: %s", m[0])
		if !strings.Contains(m[0], "connection refused") {
			t.Errorf("the error for port 81 does not say the guest refused: %s", m[0])
		}
	}
}

// dialIn connects to addr from the network namespace at path.
func dialIn(t interface{ Fatalf(string, ...any) }, path, addr string) net.Conn {
	c, err := inNetns(path, func() (net.Conn, error) { return net.DialTimeout("tcp", addr, 30*time.Second) })
	if err != nil {
		t.Fatalf("dial %s in %s: %v", addr, path, err)
	}
	return c
}

// checkStats: crictl stats and statsp report the VM's CPU and memory.
func (n *node) checkStats(id, podID string) {
	t := n.t
	// crictl prints protobuf JSON: 64-bit numbers as strings.
	type value struct {
		Value uint64 `json:"value,string"`
	}
	type usage struct {
		Cpu struct {
			UsageCoreNanoSeconds value
		}
		Memory struct {
			WorkingSetBytes value
		}
	}
	var cs struct {
		Stats []struct {
			Attributes struct{ Id string }
			usage
		}
	}
	n.mustJSON(&cs, "stats", "--id", id)
	if len(cs.Stats) != 1 || cs.Stats[0].Attributes.Id != id || cs.Stats[0].Cpu.UsageCoreNanoSeconds.Value == 0 || cs.Stats[0].Memory.WorkingSetBytes.Value == 0 {
		t.Errorf("crictl stats --id %s: %+v, want the container with CPU and memory", id, cs)
	} else {
		t.Logf("crictl stats: CPU %v, working set %d MiB", time.Duration(cs.Stats[0].Cpu.UsageCoreNanoSeconds.Value), cs.Stats[0].Memory.WorkingSetBytes.Value>>20)
	}
	var ps struct {
		Stats []struct {
			Attributes struct{ Id string }
			Linux      struct {
				usage
				Network struct {
					DefaultInterface struct {
						Name    string
						RxBytes value
					}
				}
				Containers []struct{ Attributes struct{ Id string } }
			}
		}
	}
	n.mustJSON(&ps, "statsp", "--id", podID)
	if len(ps.Stats) != 1 {
		t.Errorf("crictl statsp --id %s: %+v, want the pod", podID, ps)
		return
	}
	p := ps.Stats[0]
	if p.Attributes.Id != podID || p.Linux.Cpu.UsageCoreNanoSeconds.Value == 0 || p.Linux.Memory.WorkingSetBytes.Value == 0 ||
		len(p.Linux.Containers) != 1 || p.Linux.Containers[0].Attributes.Id != id ||
		p.Linux.Network.DefaultInterface.Name != "eth0" || p.Linux.Network.DefaultInterface.RxBytes.Value == 0 {
		t.Errorf("crictl statsp --id %s: %+v, want the pod's CPU, memory, its container and eth0's traffic", podID, p)
	}
	n.checkMetrics(id, podID)
}

// checkMetrics: crictl metricdescs and metricsp (ListMetricDescriptors,
// ListPodSandboxMetrics, what the kubelet serves at /metrics/cadvisor
// with PodAndContainerStatsFromCRI) have the VM's memory under its
// container and the pod interface's traffic under the sandbox.
func (n *node) checkMetrics(id, podID string) {
	t := n.t
	var descs struct {
		Descriptors []struct {
			Name      string
			LabelKeys []string
		}
	}
	n.mustJSON(&descs, "metricdescs")
	described := map[string]int{}
	for _, d := range descs.Descriptors {
		described[d.Name] = len(d.LabelKeys)
	}
	type metric struct {
		Name        string
		LabelValues []string
		Value       struct {
			Value uint64 `json:"value,string"`
		}
	}
	var ms struct {
		PodMetrics []struct {
			PodSandboxId     string
			Metrics          []metric
			ContainerMetrics []struct {
				ContainerId string
				Metrics     []metric
			}
		}
	}
	n.mustJSON(&ms, "metricsp")
	found := map[string]uint64{}
	for _, p := range ms.PodMetrics {
		if p.PodSandboxId != podID {
			continue
		}
		all := p.Metrics
		for _, c := range p.ContainerMetrics {
			if c.ContainerId == id {
				all = append(all, c.Metrics...)
			}
		}
		for _, m := range all {
			if described[m.Name] != len(m.LabelValues) {
				t.Errorf("metric %s has %d label values; its descriptor %d keys", m.Name, len(m.LabelValues), described[m.Name])
			}
			found[m.Name] = m.Value.Value
		}
	}
	for _, name := range []string{"container_memory_working_set_bytes", "container_network_receive_bytes_total"} {
		if found[name] == 0 {
			t.Errorf("crictl metricsp: no %s of pod %s above 0; got %v", name, podID, found)
		}
	}
}

// checkUpdate: crictl update --cpu-quota changes the VM's cgroup live; a
// new memory limit for a VM created without room for it is refused with
// what to do.
func (n *node) checkUpdate(id, podID string) {
	t := n.t
	n.must("update", "--cpu-quota", "50000", id)
	if got := n.cpuQuota(podID, id); got != "50000" {
		t.Errorf("after crictl update --cpu-quota 50000 the VM's cgroup has quota %q", got)
	}
	_, err := n.crictlRun(time.Minute, "update", "--memory", fmt.Sprint(512<<20), id)
	if err == nil || !strings.Contains(err.Error(), "set vmpod.io/max-memory when the pod is created") {
		t.Errorf("crictl update --memory 512Mi: %v, want a refusal that names vmpod.io/max-memory", err)
	}
}

// cpuQuota reads the CPU quota of the container's cgroup, in the pod
// cgroup the server made under the test's parent.
func (n *node) cpuQuota(podID, id string) string {
	file := filepath.Join("/sys/fs/cgroup", n.cgroup, "pod"+podID, id, "cpu.max") // v2: "<quota> <period>"
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err != nil {
		file = filepath.Join("/sys/fs/cgroup/cpu", n.cgroup, "pod"+podID, id, "cpu.cfs_quota_us")
	}
	b, err := os.ReadFile(file)
	if err != nil {
		n.t.Errorf("the VM's cgroup: %v", err)
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

// execInFlight starts a crictl exec -s that runs until the VM stops, and
// waits until the guest runs it; the function it returns, called after
// the VM stopped, checks that the exec ended with the VM (the VM's
// deletion waits for the execs it ends).
func (n *node) execInFlight(id string) func() {
	t := n.t
	cmd, out := n.background("exec", "-s", id, "sleep", "300")
	running := false
	for i := 0; i < 100 && !running; i++ { // bounded: the agent starts it at once
		running = strings.Contains(n.must("exec", "-s", id, "ps"), "sleep 300")
		if !running {
			time.Sleep(100 * time.Millisecond)
		}
	}
	if !running {
		t.Errorf("the guest does not run the exec's sleep 300:\n%s", out.String())
	}
	return func() {
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(out.String(), "the VM stopped while the command ran") {
				t.Errorf("an exec waiting when the VM stopped: %v:\n%s\nwant it ended, saying the VM stopped", err, out.String())
			}
		case <-time.After(time.Minute):
			t.Errorf("an exec waiting when the VM stopped is still waiting a minute after:\n%s", out.String())
		}
	}
}
