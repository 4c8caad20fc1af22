//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// portForward starts `kubectl port-forward pod/NAME :PORT...` and returns
// the local address of each port, in order; kubectl is stopped at cleanup,
// and the returned function gives what it printed on stderr.
func portForward(t *testing.T, pod string, ports ...string) ([]string, func() string) {
	t.Helper()
	bin := os.Getenv("VMPOD_E2E_KUBECTL")
	if bin == "" {
		bin = "kubectl"
	}
	ctx, cancel := context.WithCancel(context.Background())
	args := []string{"--namespace", namespace, "port-forward", "pod/" + pod}
	for _, p := range ports {
		args = append(args, ":"+p)
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr safeBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		cmd.Wait()
	})
	// "Forwarding from 127.0.0.1:41235 -> 8080", one line per port (and
	// one per [::1] where the host has IPv6).
	re := regexp.MustCompile(`^Forwarding from (127\.0\.0\.1:\d+) -> (\d+)$`)
	got := map[string]string{}
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	deadline := time.After(time.Minute)
	for len(got) < len(ports) {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("kubectl port-forward %s %v ended: %s", pod, ports, stderr.String())
			}
			if m := re.FindStringSubmatch(l); m != nil {
				got[m[2]] = m[1]
			}
		case <-deadline:
			t.Fatalf("kubectl port-forward %s %v: no local ports within a minute: %s", pod, ports, stderr.String())
		}
	}
	go func() {
		for range lines { // "Handling connection for ..."
		}
	}()
	var addrs []string
	for _, p := range ports {
		addrs = append(addrs, got[p])
	}
	return addrs, stderr.String
}

// getLocal sends an HTTP/1.0 GET to addr and returns what came back before
// the connection closed (bounded: 30 s).
func getLocal(addr string) (string, error) {
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

// TestPortForward: kubectl port-forward reaches the guest's ports (8080
// and 80 of the test guest) on both kinds of node, several connections at
// once over both forwards; a port the guest does not listen on ends the
// forwarded connection at once, and kubectl says which port failed.
func TestPortForward(t *testing.T) {
	checkLeaks(t)
	for _, d := range frontDoors(t) {
		t.Run(d.name, func(t *testing.T) {
			b := makePod("pf")
			d.place(&b.pod.Spec)
			pod := create(t, b.obj())
			waitRunning(t, pod.Name)
			waitLog(t, pod.Name, "VMPOD-GUEST: http ready")
			addrs, _ := portForward(t, pod.Name, "8080", "80")

			var wg sync.WaitGroup
			var mu sync.Mutex
			for i := range 6 {
				addr := addrs[i%2]
				wg.Go(func() {
					out, err := getLocal(addr)
					mu.Lock()
					defer mu.Unlock()
					if err != nil || !strings.Contains(out, "200 OK") || !strings.Contains(out, "vmpod-guest "+pod.Name) {
						t.Errorf("GET through the forward %s: %v:\n%s", addr, err, out)
					}
				})
			}
			wg.Wait()

			// Port 9 (discard): nothing listens on it in the test guest.
			closed, stderr := portForward(t, pod.Name, "9")
			start := time.Now()
			out, err := getLocal(closed[0])
			if took := time.Since(start); took > 20*time.Second {
				t.Errorf("a forward to a closed guest port took %v to end", took)
			}
			if strings.Contains(out, "200 OK") {
				t.Errorf("a forward to closed port 9 answered: %v %q", err, out)
			}
			if !poll(10*time.Second, func() bool { return strings.Contains(stderr(), "9") && strings.Contains(stderr(), "error") }) {
				t.Errorf("kubectl port-forward did not say that port 9 failed: %q", stderr())
			}
			t.Logf("closed port: the connection ended after %v (%v); kubectl: %s", time.Since(start).Round(10*time.Millisecond), err, strings.TrimSpace(stderr()))
		})
	}
}
