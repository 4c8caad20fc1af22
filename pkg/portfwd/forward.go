package portfwd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultDialTimeout bounds the connection to the target when
// Options.DialTimeout is 0: a guest that does not answer at all (still
// booting, or dropping the port) costs the client this long; a closed
// port is refused at once.
const DefaultDialTimeout = 10 * time.Second

// closeGrace is how long, once the target has ended its side, the
// client's side may still send before both are closed (containerd gives
// the other direction 1 s too).
const closeGrace = time.Second

// Options say where caught connections go.
type Options struct {
	// NodeNetns is the network namespace every connection to the target
	// is made from (the node's). The Forwarder does not close it.
	NodeNetns *os.File
	// Target is the address a caught connection goes to, on the port it
	// was made to; it is asked for each connection (the pod IP).
	Target func() (netip.Addr, error)
	// DialTimeout bounds each connection to the target
	// (DefaultDialTimeout if 0).
	DialTimeout time.Duration
	// OnError, if set, hears about each caught connection that could not
	// be forwarded (the client got a reset) and about accept failures.
	OnError func(error)
}

// Forwarder catches the TCP connections made to the loopback address of
// the network namespace it was started in and forwards each to the
// target, from the node's network namespace.
type Forwarder struct {
	opts      Options
	nodeNetns int
	link      int
	listeners []*net.TCPListener
	ctx       context.Context // ends with Close: dials under way give up
	cancel    context.CancelFunc

	mu     sync.Mutex
	closed bool
	conns  map[*net.TCPConn]struct{}
	wg     sync.WaitGroup
}

// Start catches connections to 127.0.0.1 and ::1, any port, in the
// calling thread's network namespace (a caller that switched one thread
// with setns must hold runtime.LockOSThread): its listeners and the
// sk_lookup program are made there, before it returns. ::1 is caught only
// where the namespace has IPv6.
func Start(o Options) (_ *Forwarder, retErr error) {
	if o.NodeNetns == nil || o.Target == nil {
		return nil, errors.New("portfwd: Options need NodeNetns and Target")
	}
	if o.DialTimeout == 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	f := &Forwarder{opts: o, nodeNetns: int(o.NodeNetns.Fd()), link: -1, conns: map[*net.TCPConn]struct{}{}}
	f.ctx, f.cancel = context.WithCancel(context.Background())
	defer func() {
		if retErr != nil {
			f.Close()
		}
	}()
	netns, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return nil, fmt.Errorf("portfwd: this network namespace: %w", err)
	}
	defer netns.Close()

	v4, err := listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f.listeners = append(f.listeners, v4)
	v4fd, err := sysfd(v4)
	if err != nil {
		return nil, err
	}
	v6fd := -1
	if v6, err := listen("tcp6", "[::1]:0"); err == nil {
		f.listeners = append(f.listeners, v6)
		if v6fd, err = sysfd(v6); err != nil {
			return nil, err
		}
	}
	if f.link, err = steer(int(netns.Fd()), v4fd, v6fd); err != nil {
		return nil, fmt.Errorf("portfwd: %w", err)
	}
	for _, l := range f.listeners {
		f.wg.Add(1)
		go f.serve(l)
	}
	return f, nil
}

// listen makes a listener on the calling thread (so in its namespace). A
// plain TCP one: Go makes MPTCP listeners where the kernel has MPTCP, and
// neither the socket map nor sk_lookup takes those.
func listen(network, addr string) (*net.TCPListener, error) {
	var lc net.ListenConfig
	lc.SetMultipathTCP(false)
	l, err := lc.Listen(context.Background(), network, addr)
	if err != nil {
		return nil, fmt.Errorf("portfwd: listen on %s: %w", addr, err)
	}
	return l.(*net.TCPListener), nil
}

// sysfd is the listener's descriptor, valid as long as the listener is
// open; the socket map takes its own reference to the socket.
func sysfd(l *net.TCPListener) (int, error) {
	rc, err := l.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	if err := rc.Control(func(s uintptr) { fd = int(s) }); err != nil {
		return -1, err
	}
	return fd, nil
}

// Close stops catching connections (connections to the loopback are
// refused again) and ends the forwards under way.
func (f *Forwarder) Close() error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil
	}
	f.closed = true
	f.cancel()
	var errs []error
	if f.link >= 0 {
		errs = append(errs, unix.Close(f.link))
	}
	for _, l := range f.listeners {
		errs = append(errs, l.Close())
	}
	for c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
	return errors.Join(errs...)
}

func (f *Forwarder) report(err error) {
	if f.opts.OnError != nil {
		f.opts.OnError(err)
	}
}

func (f *Forwarder) serve(l *net.TCPListener) {
	defer f.wg.Done()
	for {
		c, err := l.AcceptTCP()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of descriptors, most likely: the pod's own trouble.
			f.report(fmt.Errorf("portfwd: accept: %w", err))
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if !f.track(c) {
			c.Close()
			return
		}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			defer f.untrack(c)
			f.forward(c)
		}()
	}
}

func (f *Forwarder) track(c *net.TCPConn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false
	}
	f.conns[c] = struct{}{}
	return true
}

func (f *Forwarder) untrack(c *net.TCPConn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.conns, c)
}

// forward connects the caught connection to the target on the port it
// was made to. When that fails (a closed port, no answer) it resets the
// caught connection: the client's read fails at once (containerd 2.x
// passes the error on to kubectl, see the package comment).
func (f *Forwarder) forward(down *net.TCPConn) {
	defer down.Close()
	port := down.LocalAddr().(*net.TCPAddr).Port
	up, err := f.dial(port)
	if err != nil {
		down.SetLinger(0) // close with a reset
		f.report(fmt.Errorf("portfwd: port %d: %w", port, err))
		return
	}
	if !f.track(up) {
		up.Close()
		return
	}
	defer f.untrack(up)
	defer up.Close()

	clientDone := make(chan struct{})
	go func() {
		defer close(clientDone)
		io.Copy(up, down) //nolint:errcheck // the forward ends either way
		up.CloseWrite()
	}()
	io.Copy(down, up) //nolint:errcheck // the forward ends either way
	down.CloseWrite()
	select {
	case <-clientDone:
	case <-time.After(closeGrace):
	}
	up.Close()
	down.Close()
	<-clientDone
}

// dial connects to the target from the node's network namespace: the
// socket is made on a thread that joined it. That thread never comes back
// to this process's namespace: it stays locked and Go ends it with its
// goroutine.
func (f *Forwarder) dial(port int) (*net.TCPConn, error) {
	ip, err := f.opts.Target()
	if err != nil {
		return nil, fmt.Errorf("no address to forward to: %w", err)
	}
	to := netip.AddrPortFrom(ip, uint16(port)).String()
	type result struct {
		c   net.Conn
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Setns(f.nodeNetns, unix.CLONE_NEWNET); err != nil {
			done <- result{nil, fmt.Errorf("enter the node's network namespace: %w", err)}
			return
		}
		ctx, cancel := context.WithTimeout(f.ctx, f.opts.DialTimeout)
		defer cancel()
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", to)
		done <- result{c, err}
	}()
	r := <-done
	if r.err != nil {
		return nil, r.err
	}
	return r.c.(*net.TCPConn), nil
}

// InterfaceIPv4 is the first global IPv4 address of the interface name in
// the calling thread's network namespace (the kernel lists the primary
// address first): the pod IP, on the pod interface CNI made.
func InterfaceIPv4(name string) (netip.Addr, error) {
	ifc, err := net.InterfaceByName(name)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("pod interface %q: %w", name, err)
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		return netip.Addr{}, fmt.Errorf("pod interface %q: %w", name, err)
	}
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok || n.IP.To4() == nil || !n.IP.IsGlobalUnicast() {
			continue
		}
		ip, _ := netip.AddrFromSlice(n.IP.To4())
		return ip, nil
	}
	return netip.Addr{}, fmt.Errorf("pod interface %q has no IPv4 address", name)
}
