package podnet_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/vmpod/vmpod/pkg/podnet"
)

// neighbourIP is the other pod on the node in the ptp layout.
var neighbourIP = netip.MustParseAddr("10.244.0.7")

// ptpTopology is a node as CNI's ptp plugin leaves it (kind's kindnetd uses
// that plugin), with two pods:
//
//	node netns: veth0 10.244.0.1/32, route 10.244.0.5/32 dev veth0 ── pod netns:       eth0 10.244.0.5/24
//	            veth1 10.244.0.1/32, route 10.244.0.7/32 dev veth1 ── neighbour netns: eth0 10.244.0.7/24
//
// In each pod netns the kernel's connected route 10.244.0.0/24 dev eth0 is
// gone; instead 10.244.0.1 dev eth0 scope link, 10.244.0.0/24 via
// 10.244.0.1 and default via 10.244.0.1. So nothing but the gateway is on
// the link: the node forwards from pod to pod, and it answers ARP for the
// gateway alone (no proxy ARP).
type ptpTopology struct {
	topology
	neighbour string
}

func newPTPTopology(t testing.TB) ptpTopology {
	t.Helper()
	tp := ptpTopology{topology: topology{node: newNetns(t, "node"), pod: newNetns(t, "pod")}, neighbour: newNetns(t, "neighbour")}
	node := func(args ...string) { run(t, append([]string{"ip", "-n", tp.node}, args...)...) }
	sysctl := func(ns, kv string) { run(t, "ip", "netns", "exec", ns, "sysctl", "-q", "-w", kv) }
	node("link", "set", "lo", "up")
	sysctl(tp.node, "net.ipv4.ip_forward=1")
	sysctl(tp.node, "net.ipv4.conf.all.proxy_arp=0")
	for _, p := range []struct {
		ns, nodeIf, ip string
		mac            []string
	}{
		{tp.pod, nodeIf, podIP.String(), []string{"address", nodeMAC.String(), "type", "veth", "peer", "name", podIf, "address", podMAC.String()}},
		{tp.neighbour, "veth1", neighbourIP.String(), []string{"type", "veth", "peer", "name", podIf}},
	} {
		node(append(append([]string{"link", "add", p.nodeIf}, p.mac...), "netns", p.ns)...)
		node("link", "set", p.nodeIf, "mtu", fmt.Sprint(podMTU), "up")
		sysctl(tp.node, "net.ipv4.conf."+p.nodeIf+".proxy_arp=0")
		node("addr", "add", nodeIP.String()+"/32", "dev", p.nodeIf)
		node("route", "add", p.ip+"/32", "dev", p.nodeIf)

		pod := func(args ...string) { run(t, append([]string{"ip", "-n", p.ns}, args...)...) }
		pod("link", "set", "lo", "up")
		pod("link", "set", podIf, "mtu", fmt.Sprint(podMTU), "up")
		pod("addr", "add", p.ip+"/24", "dev", podIf)
		pod("route", "add", "default", "via", nodeIP.String(), "dev", podIf)
		pod("route", "del", "10.244.0.0/24", "dev", podIf)
		pod("route", "add", nodeIP.String()+"/32", "dev", podIf, "scope", "link", "src", p.ip)
		pod("route", "add", "10.244.0.0/24", "via", nodeIP.String(), "dev", podIf, "src", p.ip)
	}
	return tp
}

// TestDHCPPrefixOffLink: in the ptp layout the guest gets the pod IP as a
// /32, the gateway declared on the link, and the pod's routes.
func TestDHCPPrefixOffLink(t *testing.T) {
	tp := newPTPTopology(t)
	attach(t, tp.topology, nil)
	guest := openTap(t, tp.pod, tapName, podMAC)

	want := lease{
		Type:   "OFFER",
		YourIP: "10.244.0.5",
		Mask:   "255.255.255.255",
		Router: []string{"10.244.0.1"},
		// On-link first (RFC 3442: router 0.0.0.0), then the pod's own
		// route for its prefix, then the default route, since a client
		// that takes option 121 ignores option 3.
		Routes:    []string{"10.244.0.1/32 via 0.0.0.0", "10.244.0.0/24 via 10.244.0.1", "0.0.0.0/0 via 10.244.0.1"},
		MTU:       podMTU,
		LeaseTime: podnet.LeaseTime,
		ServerID:  "10.244.0.1",
	}
	const tries = 3
	guest.checkLease(t, want, tries)
}

// TestUDHCPCPrefixOffLink runs the test guest's DHCP client (busybox
// udhcpc with hack/guest/rootfs/etc/udhcpc.script) against the DHCP server
// in the ptp layout, in a guest netns standing in for the VM, and checks
// that the guest routes as the pod netns does and reaches the neighbour pod
// on the same node, both ways.
func TestUDHCPCPrefixOffLink(t *testing.T) {
	tp := newPTPTopology(t)
	attach(t, tp.topology, nil)
	guest := newNetnsGuest(t, tp.topology)
	udhcpc(t, guest)

	checkGuestRouting(t, tp, guest)

	// The script again on a configured guest (test/cri runs udhcpc again
	// after a takeover): the same routes, not "File exists" half-way.
	udhcpc(t, guest)
	if diff := cmp.Diff(routes(t, tp.pod), routes(t, guest)); diff != "" {
		t.Errorf("guest's routes after a second lease (-pod netns +guest):\n%s", diff)
	}
}

// newNetnsGuest stands in for a VM with a kernel of its own: a network
// namespace whose eth0 is a tap with the pod's MAC, its frames relayed to
// and from the tap Attach made in tp.pod, as QEMU's virtio-net would. The
// relay ends, and the guest's tap goes, when the test ends.
func newNetnsGuest(t testing.TB, tp topology) string {
	t.Helper()
	ns := newNetns(t, "guest")
	vm := openTap(t, tp.pod, tapName, podMAC)
	nic := openTap(t, ns, podIf, podMAC)
	run(t, "ip", "-n", ns, "link", "set", podIf, "address", podMAC.String(), "mtu", fmt.Sprint(podMTU))
	run(t, "ip", "-n", ns, "link", "set", "lo", "up")
	var wg sync.WaitGroup
	relay := func(dst, src *os.File) {
		defer wg.Done()
		buf := make([]byte, 65536)
		for {
			n, err := src.Read(buf)
			if err != nil {
				return // closed
			}
			dst.Write(buf[:n]) // a frame the other side cannot take is lost, as on a wire
		}
	}
	wg.Add(2)
	go relay(vm.f, nic.f)
	go relay(nic.f, vm.f)
	t.Cleanup(func() {
		vm.f.Close()
		nic.f.Close()
		wg.Wait()
	})
	return ns
}

// udhcpc runs the test guest's DHCP client in ns as its /init does, with
// the busybox the test guest is built from (hack/guest/build.sh copies this
// machine's /bin/busybox). The script's commands are busybox's, as in the
// guest; what it writes (/etc/resolv.conf, /run/ip, the hostname) stays in
// a mount and UTS namespace of its own.
func udhcpc(t testing.TB, ns string) {
	t.Helper()
	script, err := filepath.Abs("../../hack/guest/rootfs/etc/udhcpc.script")
	if err != nil {
		t.Fatal(err)
	}
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		t.Fatalf("%v: install busybox-static (hack/install-deps.sh)", err)
	}
	bin := t.TempDir()
	for _, applet := range []string{"ip", "sed", "rm", "hostname"} {
		if err := os.Symlink(busybox, filepath.Join(bin, applet)); err != nil {
			t.Fatal(err)
		}
	}
	resolv := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(resolv, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// As the guest's /init: 5 discovers 1 s apart at most.
	cmd := exec.CommandContext(ctx, "nsenter", "--net=/run/netns/"+ns, "unshare", "--mount", "--uts", "--",
		"/bin/sh", "-c", `mount --bind "$0" /etc/resolv.conf && mount -t tmpfs tmpfs /run && exec "$@"`, resolv,
		busybox, "udhcpc", "-i", podIf, "-s", script, "-O", "224", "-f", "-q", "-n", "-t", "5", "-T", "1")
	cmd.Env = append(os.Environ(), "PATH="+bin+":/usr/sbin:/usr/bin:/sbin:/bin")
	out, err := cmd.CombinedOutput()
	t.Logf("udhcpc:\n%s", out)
	if err != nil {
		t.Fatalf("udhcpc: %v", err)
	}
}

// nextHop is where ns's routing sends dst: "via <gateway>" or "on the link".
func nextHop(t testing.TB, ns, dst string) string {
	t.Helper()
	f := strings.Fields(run(t, "ip", "-n", ns, "route", "get", dst))
	for i := 0; i+1 < len(f); i++ {
		if f[i] == "via" {
			return "via " + f[i+1]
		}
	}
	return "on the link"
}

// routes is ns's main IPv4 routing table as "dst" or "dst via gateway",
// sorted: where each prefix goes, without protocol, scope, source or
// metric.
func routes(t testing.TB, ns string) []string {
	t.Helper()
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(run(t, "ip", "-n", ns, "-4", "route", "show", "table", "main")), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		r := f[0]
		for i := 1; i+1 < len(f); i++ {
			if f[i] == "via" {
				r += " via " + f[i+1]
			}
		}
		out = append(out, r)
	}
	slices.Sort(out)
	return out
}

// tcpHello connects from netns from to to:port, where a listener in netns
// at answers with a line; bounded: three tries of 2 s each.
func tcpHello(t testing.TB, at, from string, to netip.Addr) {
	t.Helper()
	const port = 9998
	var ln net.Listener
	if err := inNetns(at, func() (err error) {
		ln, err = net.Listen("tcp4", netip.AddrPortFrom(to, port).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		for {
			c, err := ln.Accept()
			if err != nil {
				return // closed
			}
			c.SetDeadline(time.Now().Add(2 * time.Second))
			io.WriteString(c, "hello from "+to.String()+"\n")
			c.Close()
		}
	}()
	defer func() { ln.Close(); <-served }()

	var lastErr error
	for try := 1; try <= 3; try++ {
		var got []byte
		lastErr = inNetns(from, func() error {
			c, err := net.DialTimeout("tcp4", netip.AddrPortFrom(to, port).String(), 2*time.Second)
			if err != nil {
				return err
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(2 * time.Second))
			got, err = io.ReadAll(c)
			return err
		})
		if lastErr == nil {
			if want := "hello from " + to.String() + "\n"; string(got) != want {
				t.Errorf("%s -> %s:%d: got %q, want %q", from, to, port, got, want)
			}
			return
		}
		t.Logf("try %d: %v", try, lastErr)
	}
	t.Errorf("%s -> %s:%d: %v", from, to, port, lastErr)
}

// TestNetworkdPrefixOffLink is TestUDHCPCPrefixOffLink with
// systemd-networkd as the guest's DHCP client (what netplan renders
// `dhcp4: true` to): it must take the /32 lease and option 121 and route as
// the pod netns does. networkd runs in the guest netns with a mount and UTS
// namespace of its own (a tmpfs on /run holds its state and its one
// .network file; the system's .network dirs are hidden), until the test ends.
func TestNetworkdPrefixOffLink(t *testing.T) {
	const networkd = "/lib/systemd/systemd-networkd"
	if _, err := os.Stat(networkd); err != nil {
		t.Fatalf("%v: install systemd (hack/install-deps.sh)", err)
	}
	tp := newPTPTopology(t)
	attach(t, tp.topology, nil)
	guest := newNetnsGuest(t, tp.topology)

	conf := "[Match]\nName=" + podIf + "\n\n[Network]\nDHCP=ipv4\nLinkLocalAddressing=no\nIPv6AcceptRA=no\n\n" +
		"[DHCPv4]\nUseDNS=no\nUseHostname=no\nUseDomains=no\n"
	var log lockedBuffer
	cmd := exec.Command("nsenter", "--net=/run/netns/"+guest, "unshare", "--mount", "--uts", "--",
		"/bin/sh", "-c", `mount -t sysfs -o ro sysfs /sys && mount -t tmpfs tmpfs /run && mount -t tmpfs tmpfs /etc/systemd/network &&
mount -t tmpfs tmpfs /usr/lib/systemd/network && mkdir -p /run/systemd/network &&
printf '%s' "$0" >/run/systemd/network/10-vmpod.network && exec "$1"`, conf, networkd)
	cmd.Env = append(os.Environ(), "SYSTEMD_LOG_LEVEL=debug", "SYSTEMD_LOG_TARGET=console")
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill() // networkd, which nsenter, unshare and sh became
		<-exited
		if t.Failed() {
			t.Logf("systemd-networkd:\n%s", log.String())
		}
	})

	// The lease's routes come last; wait for the default one (bounded: 30 s).
	deadline := time.Now().Add(30 * time.Second)
	for !slices.Contains(routes(t, guest), "default via "+nodeIP.String()) {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("systemd-networkd exited: %v\n%s", err, log.String())
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no default route in the guest after 30 s:\n%s", run(t, "ip", "-n", guest, "route", "show"))
		}
	}
	checkGuestRouting(t, tp, guest)
}

// checkGuestRouting checks a guest netns configured by a DHCP client in the
// ptp layout: the pod IP as a /32, the pod netns's next hop for the pod's
// neighbour, the gateway, a pod on another node and a Service (`ip route
// get` sends nothing), the pod netns's routes (option 121 applied in full),
// and TCP with the neighbour pod each way (the replies take the guest's
// routes too).
func checkGuestRouting(t *testing.T, tp ptpTopology, guest string) {
	t.Helper()
	if got := run(t, "ip", "-n", guest, "-4", "-o", "addr", "show", "dev", podIf); !strings.Contains(got, " inet 10.244.0.5/32 ") {
		t.Errorf("guest's %s: %s, want 10.244.0.5/32", podIf, got)
	}
	for _, dst := range []string{neighbourIP.String(), nodeIP.String(), "10.244.2.9", "10.96.0.10"} {
		if pod, got := nextHop(t, tp.pod, dst), nextHop(t, guest, dst); got != pod {
			t.Errorf("guest routes %s %s, the pod netns %s", dst, got, pod)
		}
	}
	if diff := cmp.Diff(routes(t, tp.pod), routes(t, guest)); diff != "" {
		t.Errorf("guest's routes (-pod netns +guest):\n%s", diff)
	}
	if t.Failed() {
		t.Logf("pod netns routes:\n%s", run(t, "ip", "-n", tp.pod, "route", "show"))
		t.Logf("guest routes:\n%s", run(t, "ip", "-n", guest, "route", "show"))
	}
	tcpHello(t, tp.neighbour, guest, neighbourIP)
	tcpHello(t, guest, tp.neighbour, podIP)
}
