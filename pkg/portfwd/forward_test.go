package portfwd_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vmpod/vmpod/pkg/portfwd"
)

// Every address these tests use lives in network namespaces they create:
//
//	pod netns: lo only (127.0.0.1, ::1): no route anywhere
//	node netns: veth n0 10.253.7.1/24 ── guest netns: veth g0 10.253.7.2/24,
//	            servers on 10.253.7.2:80 and :8080
//
// The guest netns stands for the guest: reachable from the node's
// namespace only, so a forward that reaches it was dialled from there.
const (
	nodeIP  = "10.253.7.1"
	guestIP = "10.253.7.2"
)

// hangGuard bounds every read, so that a forward that hangs fails the
// test instead of stalling it. It is not a timing assertion: the
// assertions are on what a read returns.
const hangGuard = time.Minute

var nsSeq atomic.Int32

func run(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// newNetns makes a named network namespace with lo up, removed (and
// checked gone) when the test ends.
func newNetns(t testing.TB, role string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("these tests create network namespaces: run them as root")
	}
	name := fmt.Sprintf("vmpod-portfwd-%d-%d-%s", os.Getpid(), nsSeq.Add(1), role)
	run(t, "ip", "netns", "add", name)
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v\n%s", name, err, out)
		}
		if _, err := os.Stat("/run/netns/" + name); !os.IsNotExist(err) {
			t.Errorf("netns %s still there after removal (%v)", name, err)
		}
	})
	run(t, "ip", "-n", name, "link", "set", "lo", "up")
	return name
}

// inNetns runs fn on a thread in the named namespace; sockets fn makes
// stay there.
func inNetns(t testing.TB, name string, fn func()) {
	t.Helper()
	target, err := os.Open("/run/netns/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	runtime.LockOSThread()
	self, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	defer self.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		t.Fatalf("setns %s: %v", name, err)
	}
	defer func() {
		if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
			panic(fmt.Sprintf("back to the test's network namespace: %v", err)) // the thread is lost
		}
		runtime.UnlockOSThread()
	}()
	fn()
}

type topology struct {
	pod, node, guest string
	nodeNetns        *os.File
}

func newTopology(t *testing.T) topology {
	top := topology{pod: newNetns(t, "pod"), node: newNetns(t, "node"), guest: newNetns(t, "guest")}
	run(t, "ip", "-n", top.node, "link", "add", "n0", "type", "veth", "peer", "name", "g0", "netns", top.guest)
	run(t, "ip", "-n", top.node, "addr", "add", nodeIP+"/24", "dev", "n0")
	run(t, "ip", "-n", top.guest, "addr", "add", guestIP+"/24", "dev", "g0")
	run(t, "ip", "-n", top.node, "link", "set", "n0", "up")
	run(t, "ip", "-n", top.guest, "link", "set", "g0", "up")
	f, err := os.Open("/run/netns/" + top.node)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	top.nodeNetns = f
	return top
}

// serve runs a server in the guest netns on guestIP:port until the test
// ends: it greets each connection with "port P from A" (A: the client's
// address), then echoes lines until the client's end.
func (top topology) serve(t *testing.T, port int) {
	var l net.Listener
	inNetns(t, top.guest, func() {
		var err error
		if l, err = net.Listen("tcp4", fmt.Sprintf("%s:%d", guestIP, port)); err != nil {
			t.Fatal(err)
		}
	})
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				from, _, _ := net.SplitHostPort(c.RemoteAddr().String())
				fmt.Fprintf(c, "port %d from %s\n", port, from)
				io.Copy(c, c) //nolint:errcheck
			}()
		}
	}()
}

// start starts a Forwarder in the pod netns that forwards to the guest.
func (top topology) start(t *testing.T, onError func(error)) *portfwd.Forwarder {
	var f *portfwd.Forwarder
	inNetns(t, top.pod, func() {
		var err error
		f, err = portfwd.Start(portfwd.Options{
			NodeNetns: top.nodeNetns,
			Target:    func() (netip.Addr, error) { return netip.MustParseAddr(guestIP), nil },
			OnError:   onError,
		})
		if err != nil {
			t.Fatal(err)
		}
	})
	t.Cleanup(func() { f.Close() })
	return f
}

// dial connects to addr from inside the named netns.
func dial(t *testing.T, netns, addr string) (*net.TCPConn, error) {
	var c net.Conn
	var err error
	inNetns(t, netns, func() { c, err = net.Dial("tcp", addr) })
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(hangGuard))
	return c.(*net.TCPConn), nil
}

// hasIPv6Loopback says whether the namespace has ::1 (IPv6 may be off).
func hasIPv6Loopback(t *testing.T, netns string) bool {
	ok := false
	inNetns(t, netns, func() {
		if l, err := net.Listen("tcp6", "[::1]:0"); err == nil {
			l.Close()
			ok = true
		}
	})
	return ok
}

// exchange checks one forwarded connection end to end: the guest's
// greeting, an echo, and the guest's end after the client's.
func exchange(t *testing.T, c *net.TCPConn, port int) {
	t.Helper()
	r := bufio.NewReader(c)
	greeting, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("port %d: read the greeting: %v", port, err)
	}
	if want := fmt.Sprintf("port %d from %s\n", port, nodeIP); greeting != want {
		t.Fatalf("port %d: greeting %q, want %q (the guest on that port, reached from the node's namespace)", port, greeting, want)
	}
	msg := fmt.Sprintf("hello %d\n", port)
	if _, err := io.WriteString(c, msg); err != nil {
		t.Fatal(err)
	}
	if echo, err := r.ReadString('\n'); err != nil || echo != msg {
		t.Fatalf("port %d: echo %q, %v; want %q", port, echo, err, msg)
	}
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if rest, err := io.ReadAll(r); err != nil || len(rest) > 0 {
		t.Fatalf("port %d: after the client's end: %q, %v; want the guest's end", port, rest, err)
	}
}

// TestForwardsLoopbackToTarget: connections to 127.0.0.1 and ::1 in the
// pod netns, on ports nothing in the pod netns listens on, reach the
// servers on the same ports of the target, dialled from the node's
// namespace; several at once; 127.0.0.2 and the node's own loopback are
// left alone.
func TestForwardsLoopbackToTarget(t *testing.T) {
	top := newTopology(t)
	top.serve(t, 80)
	top.serve(t, 8080)
	var errs []error
	var mu sync.Mutex
	top.start(t, func(err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() })

	hosts := []string{"127.0.0.1"}
	if hasIPv6Loopback(t, top.pod) {
		hosts = append(hosts, "::1")
	} else {
		t.Log("the pod netns has no IPv6: ::1 not tried")
	}
	for _, host := range hosts {
		for _, port := range []int{80, 8080} {
			c, err := dial(t, top.pod, net.JoinHostPort(host, fmt.Sprint(port)))
			if err != nil {
				t.Fatalf("%s port %d: %v", host, port, err)
			}
			exchange(t, c, port)
			c.Close()
		}
	}

	// Eight at once, all open before any is used.
	var conns []*net.TCPConn
	for i := 0; i < 8; i++ {
		port := []int{80, 8080}[i%2]
		c, err := dial(t, top.pod, fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		defer c.Close()
		conns = append(conns, c)
	}
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			exchange(t, c, []int{80, 8080}[i%2])
		}()
	}
	wg.Wait()

	for _, at := range []struct{ netns, addr, why string }{
		{top.pod, "127.0.0.2:8080", "only 127.0.0.1 and ::1 are caught"},
		{top.node, "127.0.0.1:8080", "nothing listens in the node's namespace"},
	} {
		if c, err := dial(t, at.netns, at.addr); err == nil {
			c.Close()
			t.Errorf("a connection to %s in the %s netns was accepted: %s", at.addr, at.netns, at.why)
		} else if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("%s in the %s netns: %v, want connection refused (%s)", at.addr, at.netns, err, at.why)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(errs) > 0 {
		t.Errorf("forward errors: %v", errs)
	}
}

// TestClosedPortResets: a connection to a port the target refuses is
// reset, so the client's read fails at once and does not wait; the
// Forwarder says why.
func TestClosedPortResets(t *testing.T) {
	top := newTopology(t)
	top.serve(t, 8080)
	errc := make(chan error, 1)
	top.start(t, func(err error) {
		select {
		case errc <- err:
		default:
		}
	})
	// The reset can come before the client's connect has returned (on
	// loopback the Forwarder may accept, dial and reset first): the
	// connect or the first read fails with it.
	c, err := dial(t, top.pod, "127.0.0.1:81")
	if err == nil {
		defer c.Close()
		var n int
		n, err = c.Read(make([]byte, 1))
		if n > 0 {
			t.Fatalf("read %d bytes from a forward to a closed port", n)
		}
	}
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("a forward to a closed port: %v; want connection reset", err)
	}
	if err := <-errc; !strings.Contains(err.Error(), "port 81") || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("forward error %q, want port 81 and connection refused", err)
	}
	// The port next to it still works.
	c2, err := dial(t, top.pod, "127.0.0.1:8080")
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	exchange(t, c2, 8080)
}

// TestCloseStopsCatching: after Close a connection to the pod's loopback
// is refused again, and a forward under way ends.
func TestCloseStopsCatching(t *testing.T) {
	top := newTopology(t)
	top.serve(t, 8080)
	f := top.start(t, nil)
	c, err := dial(t, top.pod, "127.0.0.1:8080")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(c); err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("a forward under Close: %v, want its end", err)
	}
	if c, err := dial(t, top.pod, "127.0.0.1:8080"); err == nil {
		c.Close()
		t.Error("127.0.0.1:8080 in the pod netns still accepted after Close")
	} else if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("127.0.0.1:8080 after Close: %v, want connection refused", err)
	}
}

// TestInterfaceIPv4 reads the address the shim forwards to.
func TestInterfaceIPv4(t *testing.T) {
	top := newTopology(t)
	inNetns(t, top.node, func() {
		ip, err := portfwd.InterfaceIPv4("n0")
		if err != nil || ip.String() != nodeIP {
			t.Errorf("InterfaceIPv4(n0) = %v, %v; want %s", ip, err, nodeIP)
		}
		if _, err := portfwd.InterfaceIPv4("lo"); err == nil {
			t.Error("InterfaceIPv4(lo) found a global address")
		}
	})
}
