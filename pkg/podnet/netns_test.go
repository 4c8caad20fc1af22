package podnet_test

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Every address these tests use lives in network namespaces they create:
//
//	node netns: veth0 10.244.0.1/24 ── pod netns: eth0 10.244.0.5/24, default via 10.244.0.1
//
// Namespaces are made and removed with iproute2 (`ip netns`), which the
// assertions use too, so what is checked does not go through the code under
// test.
const (
	podIf   = "eth0"
	nodeIf  = "veth0"
	tapName = "tap0"
	podMTU  = 1450 // not 1500, so a tap left at the default would show
)

var (
	podMAC  = net.HardwareAddr{0x02, 0x42, 0x0a, 0xf4, 0x00, 0x05}
	nodeMAC = net.HardwareAddr{0x02, 0x42, 0x0a, 0xf4, 0x00, 0x01}
	nsSeq   atomic.Int32
)

func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("these tests create network namespaces: run them as root")
	}
}

// run runs an iproute2 (or other) command and returns its standard output;
// it fails the test if the command fails. Standard error is left out of the
// result: iproute2 warns there about other tests' namespaces coming and
// going ("Peer netns reference is invalid").
func run(t testing.TB, args ...string) string {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.Bytes())
	}
	return string(out)
}

// newNetns creates a named network namespace that is removed when the test
// ends, and checks that it is gone.
func newNetns(t testing.TB, role string) string {
	t.Helper()
	requireRoot(t)
	name := fmt.Sprintf("vmpod-podnet-%d-%d-%s", os.Getpid(), nsSeq.Add(1), role)
	run(t, "ip", "netns", "add", name)
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v\n%s", name, err, out)
		}
		if _, err := os.Stat("/run/netns/" + name); !os.IsNotExist(err) {
			t.Errorf("netns %s still there after removal (%v)", name, err)
		}
	})
	return name
}

type topology struct {
	node, pod string // netns names
}

// newTopology builds node <-veth-> pod as CNI's bridge plugin would leave a
// pod, minus the bridge.
func newTopology(t testing.TB) topology {
	t.Helper()
	tp := topology{node: newNetns(t, "node"), pod: newNetns(t, "pod")}
	node := func(args ...string) { run(t, append([]string{"ip", "-n", tp.node}, args...)...) }
	pod := func(args ...string) { run(t, append([]string{"ip", "-n", tp.pod}, args...)...) }
	node("link", "add", nodeIf, "address", nodeMAC.String(), "type", "veth",
		"peer", "name", podIf, "address", podMAC.String(), "netns", tp.pod)
	node("link", "set", "lo", "up")
	node("link", "set", nodeIf, "mtu", fmt.Sprint(podMTU), "up")
	node("addr", "add", "10.244.0.1/24", "dev", nodeIf)
	pod("link", "set", "lo", "up")
	pod("link", "set", podIf, "mtu", fmt.Sprint(podMTU), "up")
	pod("addr", "add", "10.244.0.5/24", "dev", podIf)
	pod("route", "add", "default", "via", "10.244.0.1", "dev", podIf)
	waitDAD(t, tp.pod, podIf)
	return tp
}

// waitDAD waits (bounded) until duplicate address detection has ended for
// dev's IPv6 addresses (its link-local one, made when it came up), so that
// the address's "tentative" flag does not change under a test that
// compares the pod's network before and after.
func waitDAD(t testing.TB, ns, dev string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		out := run(t, "ip", "-n", ns, "-6", "addr", "show", "dev", dev, "tentative")
		if strings.TrimSpace(out) == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s in %s: IPv6 duplicate address detection not done after 10 s:\n%s", dev, ns, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// inNetns runs f on an OS thread that has entered the named namespace, and
// waits for it. Sockets and fds f opens stay in that namespace. The thread
// is never handed back to the Go scheduler: the goroutine exits locked, so
// Go retires the thread.
func inNetns(name string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		fd, err := unix.Open("/run/netns/"+name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- err
			return
		}
		err = unix.Setns(fd, unix.CLONE_NEWNET)
		unix.Close(fd)
		if err != nil {
			errc <- fmt.Errorf("setns %s: %w", name, err)
			return
		}
		errc <- f()
	}()
	return <-errc
}
