package containerd

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// VMDaemon is the node daemon (`vm-runtime daemon`) the vmpod shims of a
// Containerd ask to run their VMs.
type VMDaemon struct {
	// Bin is vm-runtime; default ShimDir/vm-runtime.
	Bin string
	// StateRoot is its --state-root (pods' dirs, libvirt's root,
	// checkpoints); default Root/vmpod.
	StateRoot string
	// CapsCache is its --capabilities-cache; default StateRoot/caps.
	CapsCache string
	// Args are more flags.
	Args []string
}

// DaemonSocket is where the node daemon serves the node API, which the
// shims find in $VMPOD_NODE_SOCKET; "" without a daemon.
func (c *Containerd) DaemonSocket() string {
	if c.opts.VMDaemon == nil {
		return ""
	}
	return filepath.Join(c.Root, "vmd.sock")
}

// DaemonLogPath collects the node daemon's output over all its runs.
func (c *Containerd) DaemonLogPath() string { return filepath.Join(c.Root, "vmd.log") }

func (c *Containerd) daemonDefaults() {
	d := c.opts.VMDaemon
	if d.Bin == "" {
		d.Bin = filepath.Join(c.opts.ShimDir, "vm-runtime")
	}
	if d.StateRoot == "" {
		d.StateRoot = filepath.Join(c.Root, "vmpod")
	}
	if d.CapsCache == "" {
		d.CapsCache = filepath.Join(d.StateRoot, "caps")
	}
}

// StartDaemon runs the node daemon in the node's network namespace and
// the holder's mount namespace (where containerd's bundles and the pods'
// network namespaces are), and waits until it serves; Start calls it
// before containerd, a test again after KillDaemon.
func (c *Containerd) StartDaemon(t testing.TB) {
	t.Helper()
	d := c.opts.VMDaemon
	if d == nil {
		t.Fatal("containerd harness: StartDaemon without Options.VMDaemon")
	}
	logf, err := os.OpenFile(c.DaemonLogPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	sock := c.DaemonSocket()
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	// containerd's state dir is this harness's, where its CRI mounts
	// image volumes.
	cmd, err := c.spawn(logf, append([]string{d.Bin, "daemon", "--socket", sock, "--state-root", d.StateRoot,
		"--capabilities-cache", d.CapsCache, "--containerd-state-dir", newDirs(c.Root).State}, d.Args...)...)
	if err != nil {
		t.Fatalf("start vm-runtime daemon: %v", err)
	}
	exited := make(chan struct{})
	c.mu.Lock()
	c.daemon, c.daemonExited = cmd, exited
	c.mu.Unlock()
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	deadline := time.Now().Add(c.opts.ReadyTimeout)
	for {
		if conn, err := net.Dial("unix", sock); err == nil {
			conn.Close()
			t.Logf("vm-runtime daemon: pid %d, serving %s", cmd.Process.Pid, sock)
			return
		}
		select {
		case <-exited:
			t.Fatalf("vm-runtime daemon exited before it served %s:\n%s", sock, tail(c.DaemonLogPath(), 40))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("vm-runtime daemon does not serve %s after %v:\n%s", sock, c.opts.ReadyTimeout, tail(c.DaemonLogPath(), 40))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// DaemonPID is the running node daemon's pid; 0 if none runs.
func (c *Containerd) DaemonPID() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.daemon == nil {
		return 0
	}
	select {
	case <-c.daemonExited:
		return 0
	default:
		return c.daemon.Process.Pid
	}
}

// KillDaemon sends the node daemon sig and waits, bounded, until it is
// gone.
func (c *Containerd) KillDaemon(t testing.TB, sig syscall.Signal) {
	t.Helper()
	if err := c.stopDaemon(sig, 15*time.Second); err != nil {
		t.Fatal(err)
	}
}

// stopDaemon signals the daemon and waits up to grace for it to go.
func (c *Containerd) stopDaemon(sig syscall.Signal, grace time.Duration) error {
	c.mu.Lock()
	cmd, exited := c.daemon, c.daemonExited
	c.mu.Unlock()
	if cmd == nil {
		return nil
	}
	select {
	case <-exited:
		return nil
	default:
	}
	if err := cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	select {
	case <-exited:
		return nil
	case <-time.After(grace):
	}
	cmd.Process.Kill()
	<-exited
	return fmt.Errorf("vm-runtime daemon pid %d ignored %v for %v; killed", cmd.Process.Pid, sig, grace)
}
