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
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Fatalf("%v: run hack/install-deps.sh", err)
	}
	work := t.TempDir()
	kernel, initrd := guestFiles(t, work) // at most 30 s
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	tp := newTopology(t)
	serial := filepath.Join(work, "serial.log")
	resolv := filepath.Join(work, "resolv.conf")
	if err := os.WriteFile(resolv, []byte("search default.svc.cluster.local svc.cluster.local cluster.local\nnameserver 10.96.0.10\noptions ndots:5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := json.Marshal(helperConfig{
		Interface: podIf, Tap: tapName, ResolvConf: resolv, Hostname: "vmpod-e2e",
		QEMU: []string{"qemu-system-x86_64", "-accel", "tcg", "-m", "256", "-nographic",
			"-kernel", kernel, "-initrd", initrd,
			"-append", "console=ttyS0", "-serial", "file:" + serial,
			"-display", "none", "-no-reboot", "-nodefaults"},
	})
	if err != nil {
		t.Fatal(err)
	}

	// The helper is this test binary, exec'd by nsenter inside the pod netns
	// for its whole life, as the shim is.
	helper := exec.Command("nsenter", "--net=/run/netns/"+tp.pod, os.Args[0])
	helper.Env = append(os.Environ(), helperEnv+"="+string(cfg))
	var stderr lockedBuffer
	helper.Stderr = &stderr
	stdin, err := helper.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 16)
	exited := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		exited <- helper.Wait() // after the last read, as os/exec requires
	}()
	var qemuPid int
	helperDone := false
	t.Cleanup(func() {
		// Only if the test failed half-way: end what was started, by PID.
		if !helperDone {
			helper.Process.Kill()
			<-exited
		}
		if qemuPid != 0 && isQEMU(qemuPid) {
			t.Errorf("QEMU (pid %d) outlived the test; killing it", qemuPid)
			syscall.Kill(qemuPid, syscall.SIGKILL)
		}
		if t.Failed() {
			t.Logf("helper stderr:\n%s", stderr.String())
			if b, err := os.ReadFile(serial); err == nil {
				t.Logf("serial console:\n%s", b)
			}
		}
	})

	// Attach, then QEMU.
	for qemuPid == 0 {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatal("helper exited before starting QEMU")
			}
			t.Log("helper: " + line)
			if pid, found := strings.CutPrefix(line, "qemu "); found {
				qemuPid, _ = strconv.Atoi(pid)
			}
		case <-ctx.Done():
			t.Fatal("no QEMU after", time.Since(start))
		}
	}
	attached := time.Since(start)

	// The guest prints its DHCP lease on the console.
	ipLine := regexp.MustCompile(`VMPOD-GUEST: (ip \S+|dhcp failed)`)
	var got string
	for got == "" {
		b, _ := os.ReadFile(serial)
		if m := ipLine.FindSubmatch(b); m != nil {
			got = string(m[1])
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("no DHCP result on the console after", time.Since(start))
		case err := <-exited:
			helperDone = true
			t.Fatalf("helper exited: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	leased := time.Since(start)
	if got != "ip 10.244.0.5/24" {
		t.Fatalf("guest console: %q, want %q", "VMPOD-GUEST: "+got, "VMPOD-GUEST: ip 10.244.0.5/24")
	}

	// HTTP from the node netns to the pod IP; the guest answers with the
	// hostname it got by DHCP.
	body, err := httpGetFromNetns(ctx, tp.node, "http://10.244.0.5:8080/")
	if err != nil {
		t.Fatal(err)
	}
	if want := "vmpod-guest vmpod-e2e\n"; body != want {
		t.Errorf("GET http://10.244.0.5:8080/ = %q, want %q", body, want)
	}
	answered := time.Since(start)
	t.Logf("attached + QEMU started %.1fs, DHCP lease on console %.1fs, HTTP answered %.1fs",
		attached.Seconds(), leased.Seconds(), answered.Seconds())

	// Stop: the helper kills its QEMU and Closes.
	stdin.Close()
	var rest []string
	for line := range lines {
		rest = append(rest, line)
	}
	select {
	case err := <-exited:
		helperDone = true
		if err != nil {
			t.Errorf("helper: %v\n%s", err, stderr.String())
		}
	case <-ctx.Done():
		t.Fatal("helper did not exit")
	}
	if !slicesContains(rest, "closed") {
		t.Errorf("helper said %q, want it to end with \"closed\"", rest)
	}
	if isQEMU(qemuPid) {
		t.Errorf("QEMU pid %d still running", qemuPid)
	}
	tapGone(t, tp.pod)
	if q := run(t, "tc", "-n", tp.pod, "qdisc", "show", "dev", podIf); strings.Contains(q, "ingress") {
		t.Errorf("%s still has an ingress qdisc:\n%s", podIf, q)
	}
	if a := run(t, "ip", "-n", tp.pod, "addr", "show", "dev", podIf); !strings.Contains(a, "inet 10.244.0.5/24") {
		t.Errorf("%s lost the pod IP:\n%s", podIf, a)
	}
	t.Logf("helper stderr (DHCP log):\n%s", grepLines(stderr.String(), "podnet-dhcp"))
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
