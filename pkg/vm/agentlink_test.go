package vm_test

import (
	"context"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vmpod/vmpod/pkg/vm"
)

// TestGuestAgentSocketLink: a QEMU that a guest took over may do whatever
// its uid may in its mount namespace. If it can put a link where the
// guest agent's socket was, libvirt (root, in the runtime) follows it the
// next time it connects to the agent, which it does when the guest's agent
// reopens its port, and talks to whatever socket the link names (another
// pod's agent, containerd's). Here QEMU's uid, in QEMU's mount namespace,
// tries to replace the socket with a link to a socket the test listens
// on, then the guest restarts its agent: libvirt must never connect to the
// test's socket, and exec must work again through the real one.
func TestGuestAgentSocketLink(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	g := startGuestWithAgent(ctx, t)

	decoy := filepath.Join(t.TempDir(), "decoy.sock")
	l, err := net.Listen("unix", decoy)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	connected := make(chan struct{})
	go func() {
		if c, err := l.Accept(); err == nil {
			c.Close()
			close(connected)
		}
	}()

	// As QEMU: its uid and gid, no capabilities, its mount namespace and
	// root.
	socket := g.layout.GuestAgent()
	asQEMU := exec.CommandContext(ctx, "nsenter", "-t", strconv.Itoa(g.pid), "-m", "-r", "-w",
		"-S", strconv.Itoa(int(g.jail.UID)), "-G", strconv.Itoa(int(g.jail.GID)),
		"/usr/bin/sh", "-c", `rm -f "$1" && ln -s "$2" "$1"`, "sh", socket, decoy)
	if out, err := asQEMU.CombinedOutput(); err != nil {
		t.Logf("QEMU's uid could not replace %s with a link: %v: %s", socket, err, out)
	} else {
		t.Logf("QEMU's uid replaced %s with a link to %s", socket, decoy)
	}

	// The guest's agent closes its port and opens it again: libvirt drops
	// its connection to the agent and makes a new one.
	agentPID := func(ctx context.Context) (string, error) {
		short, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		res, err := g.m.Exec(short, vm.ExecRequest{Args: []string{"pidof", "qemu-ga"}})
		return strings.TrimSpace(string(res.Stdout)), err
	}
	before, err := agentPID(ctx)
	if err != nil || before == "" {
		t.Fatalf("the guest agent's pid: %q, %v", before, err)
	}
	restart := `setsid sh -c 'sleep 1; kill $(pidof qemu-ga); sleep 1; ` +
		`exec qemu-ga -m virtio-serial -p /dev/virtio-ports/org.qemu.guest_agent.0 -f /run/qemu-ga.pid -t /run -l /run/qemu-ga.log' ` +
		`</dev/null >/dev/null 2>&1 &`
	if res, err := g.m.Exec(ctx, vm.ExecRequest{Args: []string{"sh", "-c", restart}}); err != nil || res.ExitCode != 0 {
		t.Fatalf("restarting the guest's agent: %+v, %v", res, err)
	}
	// Until a new agent answers (or libvirt dials the decoy): bounded,
	// polled.
	wait, cancelWait := context.WithTimeout(ctx, 2*time.Minute)
	defer cancelWait()
	for {
		select {
		case <-connected:
			t.Fatalf("libvirt connected to %s, the socket QEMU's link named", decoy)
		case <-wait.Done():
			t.Fatalf("no new guest agent answered (the one before was pid %s)", before)
		case <-time.After(500 * time.Millisecond):
		}
		pid, err := agentPID(wait)
		if err != nil {
			t.Logf("agent: %v", err)
			continue
		}
		if pid != before {
			t.Logf("a new agent answers: pid %s (before: %s)", pid, before)
			break
		}
	}
	select {
	case <-connected:
		t.Errorf("libvirt connected to %s, the socket QEMU's link named", decoy)
	default:
	}
}
