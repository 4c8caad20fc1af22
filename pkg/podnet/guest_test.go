package podnet_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// guestFiles puts the test guest's kernel and initrd (hack/guest/build.sh's
// output) into dst and returns their paths. Taking them first means a
// rebuild while the test runs cannot change them under QEMU; build.sh's lock,
// held shared, keeps a build in progress from being half read. A guest that
// is being built is waited for, boundedly.
func guestFiles(t testing.TB, dst string) (kernel, initrd string) {
	t.Helper()
	src := os.Getenv("VMPOD_GUEST_DIR")
	if src == "" {
		src = "../../_output/guest"
	}
	var err error
	for range 30 {
		if err = snapshotGuest(src, dst); err == nil {
			return filepath.Join(dst, "vmlinux"), filepath.Join(dst, "initrd.img")
		}
		time.Sleep(time.Second)
	}
	t.Fatalf("test guest: %v: run `make guest` or hack/guest/build.sh", err)
	return "", ""
}

func snapshotGuest(src, dst string) error {
	if lock, err := os.Open(filepath.Join(src, ".lock")); err == nil {
		defer lock.Close()
		if err := unix.Flock(int(lock.Fd()), unix.LOCK_SH|unix.LOCK_NB); err != nil {
			return fmt.Errorf("%s is being built: %w", src, err)
		}
	}
	for _, f := range []string{"vmlinux", "initrd.img"} {
		from, to := filepath.Join(src, f), filepath.Join(dst, f)
		if err := os.Link(from, to); err == nil {
			continue // build.sh replaces files by rename, so a link is a snapshot
		}
		b, err := os.ReadFile(from)
		if err != nil {
			return err
		}
		if err := os.WriteFile(to, b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// TestGuest boots the test guest under QEMU (TCG) on a tap that Attach made
// in a pod netns, and reaches its HTTP server on the pod IP from the node
// netns. The guest learns its address only from our DHCP server.
func TestGuest(t *testing.T) {
	g := startGuest(t, newTopology)
	if got := g.lease(t); got != "ip 10.244.0.5/24" {
		t.Fatalf("guest console: %q, want %q", "VMPOD-GUEST: "+got, "VMPOD-GUEST: ip 10.244.0.5/24")
	}
	leased := time.Since(g.start)

	// HTTP from the node netns to the pod IP; the guest answers with the
	// hostname it got by DHCP and the address it holds.
	body, err := httpGetFromNetns(g.ctx, g.tp.node, "http://10.244.0.5:8080/")
	if err != nil {
		t.Fatal(err)
	}
	if want := "vmpod-guest vmpod-e2e 10.244.0.5/24\n"; body != want {
		t.Errorf("GET http://10.244.0.5:8080/ = %q, want %q", body, want)
	}
	answered := time.Since(g.start)
	t.Logf("attached + QEMU started %.1fs, DHCP lease on console %.1fs, HTTP answered %.1fs",
		g.attached.Seconds(), leased.Seconds(), answered.Seconds())
	g.stop(t)
}

// TestGuestPrefixOffLink boots the test guest in the ptp layout (see
// ptpTopology), where the pod's /24 is not on the link, and reaches it from
// the neighbour pod on the same node: the guest's answers must go through
// the gateway, as the pod netns's would, since nobody answers its ARP for
// the neighbour.
func TestGuestPrefixOffLink(t *testing.T) {
	var tp ptpTopology
	g := startGuest(t, func(t testing.TB) topology {
		tp = newPTPTopology(t)
		return tp.topology
	})
	if got := g.lease(t); got != "ip 10.244.0.5/32" {
		// Go on: what matters is whether the neighbour gets through.
		t.Errorf("guest console: %q, want %q", "VMPOD-GUEST: "+got, "VMPOD-GUEST: ip 10.244.0.5/32")
	}
	for _, from := range []struct{ name, ns string }{{"neighbour pod", tp.neighbour}, {"node", tp.node}} {
		// Bounded each, so that g.stop has time left when one fails.
		ctx, cancel := context.WithTimeout(g.ctx, 20*time.Second)
		body, err := httpGetFromNetns(ctx, from.ns, "http://10.244.0.5:8080/")
		cancel()
		if err != nil {
			t.Errorf("from the %s: %v", from.name, err)
		} else if want := "vmpod-guest vmpod-e2e 10.244.0.5/32\n"; body != want {
			t.Errorf("from the %s: GET http://10.244.0.5:8080/ = %q, want %q", from.name, body, want)
		}
	}
	g.stop(t)
}

// guestRun is the test guest booted by the shim's stand-in (podHelper) in
// a pod netns.
type guestRun struct {
	ctx      context.Context
	tp       topology
	start    time.Time
	attached time.Duration // from start to QEMU started
	serial   string        // the console's log file
	stdin    io.WriteCloser
	stderr   *lockedBuffer
	lines    chan string
	exited   chan error
	qemuPid  int
	// helperDone: the helper's exit was received from exited.
	helperDone bool
}

// startGuest builds a topology with newTopology and starts the helper in
// its pod netns: Inspect, Attach and QEMU with the test guest on the tap.
// It returns once QEMU runs. Everything the test needs of the guest must
// happen within the 90 s of g.ctx.
func startGuest(t *testing.T, newTopology func(testing.TB) topology) *guestRun {
	t.Helper()
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Fatalf("%v: run hack/install-deps.sh", err)
	}
	work := t.TempDir()
	kernel, initrd := guestFiles(t, work) // at most 30 s
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	g := &guestRun{
		ctx:    ctx,
		tp:     newTopology(t),
		serial: filepath.Join(work, "serial.log"),
		stderr: &lockedBuffer{},
		lines:  make(chan string, 16),
		exited: make(chan error, 1),
	}
	resolv := filepath.Join(work, "resolv.conf")
	if err := os.WriteFile(resolv, []byte("search default.svc.cluster.local svc.cluster.local cluster.local\nnameserver 10.96.0.10\noptions ndots:5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := json.Marshal(helperConfig{
		Interface: podIf, Tap: tapName, ResolvConf: resolv, Hostname: "vmpod-e2e",
		QEMU: []string{"qemu-system-x86_64", "-accel", "tcg", "-m", "256", "-nographic",
			"-kernel", kernel, "-initrd", initrd,
			"-append", "console=ttyS0", "-serial", "file:" + g.serial,
			"-display", "none", "-no-reboot", "-nodefaults"},
	})
	if err != nil {
		t.Fatal(err)
	}

	// The helper is this test binary, exec'd by nsenter inside the pod netns
	// for its whole life, as the shim is.
	helper := exec.Command("nsenter", "--net=/run/netns/"+g.tp.pod, os.Args[0])
	helper.Env = append(os.Environ(), helperEnv+"="+string(cfg))
	helper.Stderr = g.stderr
	if g.stdin, err = helper.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	g.start = time.Now()
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			g.lines <- sc.Text()
		}
		close(g.lines)
		g.exited <- helper.Wait() // after the last read, as os/exec requires
	}()
	t.Cleanup(func() {
		// Only if the test failed half-way: end what was started, by PID.
		if !g.helperDone {
			helper.Process.Kill()
			<-g.exited
		}
		if g.qemuPid != 0 && isQEMU(g.qemuPid) {
			t.Errorf("QEMU (pid %d) outlived the test; killing it", g.qemuPid)
			syscall.Kill(g.qemuPid, syscall.SIGKILL)
		}
		if t.Failed() {
			t.Logf("helper stderr:\n%s", g.stderr.String())
			if b, err := os.ReadFile(g.serial); err == nil {
				t.Logf("serial console:\n%s", b)
			}
		}
	})

	// Attach, then QEMU.
	for g.qemuPid == 0 {
		select {
		case line, ok := <-g.lines:
			if !ok {
				t.Fatal("helper exited before starting QEMU")
			}
			t.Log("helper: " + line)
			if pid, found := strings.CutPrefix(line, "qemu "); found {
				g.qemuPid, _ = strconv.Atoi(pid)
			}
		case <-ctx.Done():
			t.Fatal("no QEMU after", time.Since(g.start))
		}
	}
	g.attached = time.Since(g.start)
	return g
}

// lease waits for the DHCP lease the guest prints on its console and
// returns "ip <address>/<prefix length>", or "dhcp failed".
func (g *guestRun) lease(t *testing.T) string {
	t.Helper()
	ipLine := regexp.MustCompile(`VMPOD-GUEST: (ip \S+|dhcp failed)`)
	for {
		b, _ := os.ReadFile(g.serial)
		if m := ipLine.FindSubmatch(b); m != nil {
			return string(m[1])
		}
		select {
		case <-g.ctx.Done():
			t.Fatal("no DHCP result on the console after", time.Since(g.start))
		case err := <-g.exited:
			g.helperDone = true
			t.Fatalf("helper exited: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// stop has the helper kill its QEMU and Close, and checks that the pod
// netns is as CNI left it.
func (g *guestRun) stop(t *testing.T) {
	t.Helper()
	g.stdin.Close()
	var rest []string
	for line := range g.lines {
		rest = append(rest, line)
	}
	select {
	case err := <-g.exited:
		g.helperDone = true
		if err != nil {
			t.Errorf("helper: %v\n%s", err, g.stderr.String())
		}
	case <-g.ctx.Done():
		t.Fatal("helper did not exit")
	}
	if !slicesContains(rest, "closed") {
		t.Errorf("helper said %q, want it to end with \"closed\"", rest)
	}
	if isQEMU(g.qemuPid) {
		t.Errorf("QEMU pid %d still running", g.qemuPid)
	}
	tapGone(t, g.tp.pod)
	if q := run(t, "tc", "-n", g.tp.pod, "qdisc", "show", "dev", podIf); strings.Contains(q, "ingress") {
		t.Errorf("%s still has an ingress qdisc:\n%s", podIf, q)
	}
	if a := run(t, "ip", "-n", g.tp.pod, "addr", "show", "dev", podIf); !strings.Contains(a, "inet 10.244.0.5/24") {
		t.Errorf("%s lost the pod IP:\n%s", podIf, a)
	}
	t.Logf("helper stderr (DHCP log):\n%s", grepLines(g.stderr.String(), "podnet-dhcp"))
}

// httpGetFromNetns GETs url with a connection made inside netns, retrying
// (boundedly) while the guest's server comes up.
func httpGetFromNetns(ctx context.Context, ns, url string) (string, error) {
	client := &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{
			DisableKeepAlives: true,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				var c net.Conn
				err := inNetns(ns, func() (err error) {
					d := net.Dialer{Timeout: 3 * time.Second}
					c, err = d.DialContext(ctx, network, addr)
					return err
				})
				return c, err
			},
		},
	}
	var lastErr error
	for range 30 {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return "", err
		}
		resp, err := client.Do(req)
		if err == nil {
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil && resp.StatusCode == http.StatusOK {
				return string(b), nil
			}
			lastErr = fmt.Errorf("status %s, body %q, %v", resp.Status, b, err)
		} else {
			lastErr = err
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("GET %s: %w (last: %v)", url, ctx.Err(), lastErr)
		case <-time.After(500 * time.Millisecond):
		}
	}
	return "", fmt.Errorf("GET %s: gave up: %v", url, lastErr)
}

// isQEMU reports whether pid is (still) a QEMU, so that a recycled PID is
// never signalled.
func isQEMU(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && bytes.Contains(b, []byte("qemu-system"))
}

func slicesContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func grepLines(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
