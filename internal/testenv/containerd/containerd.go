package containerd

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Options says how to run containerd. The zero value is a working node with
// runc as the default runtime and a vmpod runtime whose shim is looked up on
// the system PATH.
type Options struct {
	// Release is the containerd to run: Containerd24 (the zero value) or
	// Containerd17.
	Release Release
	// ShimDir is put first on containerd's PATH, so that the vmpod runtime
	// (runtime_type io.containerd.vmpod.v2) resolves to
	// ShimDir/containerd-shim-vmpod-v2. Shims inherit that PATH.
	ShimDir string
	// VMPodSandboxer is the vmpod runtime's sandboxer: "podsandbox" (the
	// default: the sandbox is a pause task through the shim) or "shim" (the
	// sandbox API: CreateSandbox gets the whole pod config; 2.x only).
	VMPodSandboxer string
	// Snapshotter for CRI and image import: "" picks overlayfs when an
	// overlay mount works under the root, else native.
	Snapshotter string
	// BinDir holds containerd, ctr, crictl and (2.4 only)
	// containerd-shim-runc-v2. Default for 2.4: $VMPOD_CONTAINERD_BIN, else
	// <repo>/_output/bin, filled (and checked against the pinned versions)
	// by hack/containerd/install.sh; for 1.7: $VMPOD_CONTAINERD17_BIN, else
	// <repo>/_output/containerd-1.7/bin by hack/containerd/install-1.7.sh.
	BinDir string
	// PauseArchive is the OCI archive of the sandbox image, imported before
	// containerd is handed to the test. Default: $VMPOD_PAUSE_ARCHIVE, else
	// built by hack/pause/build.sh into <repo>/_output/pause.
	PauseArchive string
	// PauseImage is the name inside PauseArchive; default
	// localhost/vmpod/pause:v1.
	PauseImage string
	// PodCIDR is the bridge network's subnet; default 10.88.0.0/16. It only
	// exists inside the node's network namespace.
	PodCIDR string
	// LogLevel of containerd: default "info". At debug, shims get -debug.
	LogLevel string
	// Env is added to containerd's environment, which every shim inherits.
	Env []string
	// VMDaemon, when set, is the node daemon the vmpod shims ask to run
	// their VMs (vmdaemon.go): it runs before containerd, beside it, and
	// stops at Close.
	VMDaemon *VMDaemon
	// ExtraConfig is TOML appended to config.toml: new tables only (TOML
	// refuses a table defined twice).
	ExtraConfig string
	// CRITimeout is crictl's --timeout; default 2m.
	CRITimeout time.Duration
	// ReadyTimeout bounds the wait for CRI to report RuntimeReady and
	// NetworkReady after each (re)start; default 60s.
	ReadyTimeout time.Duration
}

// Fixed names inside the node's network namespace.
const (
	nodeLink     = "node0"
	nodePeerLink = "node1"
	// NodeIP is the node's non-loopback address, on one end of a veth pair
	// whose both ends are inside the node's network namespace. NodePeerIP
	// is on the other end.
	NodeIP     = "10.87.0.1"
	NodePeerIP = "10.87.0.2"
	nodePrefix = "/24"

	defaultPodCIDR    = "10.88.0.0/16"
	defaultPauseImage = "localhost/vmpod/pause:v1"
	cniBinDir         = "/usr/lib/cni"
)

// Containerd is one running containerd. Its exported fields are fixed for
// its life; Restart keeps them.
type Containerd struct {
	// Root is the temporary directory holding everything: config.toml,
	// containerd's root and state, shim sockets, runc state, CNI config,
	// logs.
	Root string
	// Address is containerd's gRPC socket (CRI and containerd API).
	Address string
	// Endpoint is "unix://" + Address, for crictl and CRI clients.
	Endpoint string
	// ConfigPath is the generated config.toml.
	ConfigPath string
	// LogPath collects containerd's stdout and stderr over all its runs.
	LogPath string
	// LogDir is where NewPodConfig puts pod log directories.
	LogDir string
	// NetNS is the node's network namespace (a path under /run/netns);
	// NetNSName is its name for `ip netns`.
	NetNS, NetNSName string
	// CgroupParent exists in every cgroup v1 hierarchy and in
	// /sys/fs/cgroup/unified; NewPodConfig puts pods under it.
	CgroupParent string
	// Snapshotter is the one CRI unpacks images for.
	Snapshotter string
	// PauseImage is the pinned sandbox image.
	PauseImage string
	// PodCIDR is the bridge network's subnet.
	PodCIDR string
	// BinDir holds containerd, ctr and crictl.
	BinDir string
	// Release is the containerd running.
	Release Release

	opts Options
	inst *instance
	env  []string

	mu           sync.Mutex
	cmd          *exec.Cmd
	exited       chan struct{}
	waitErr      error
	closed       bool
	daemon       *exec.Cmd     // the node daemon (VMDaemon); nil without one
	daemonExited chan struct{} // closed when daemon was reaped
}

// Start runs containerd for the test and registers its cleanup. It fails
// the test (never skips) when something it needs is missing.
func Start(t testing.TB, opts Options) *Containerd {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("containerd harness: must run as root")
	}
	for _, tool := range []string{"nsenter", "unshare", "ip", "mount"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("containerd harness: %s not found: %v", tool, err)
		}
	}
	if _, err := os.Stat(filepath.Join(cniBinDir, "bridge")); err != nil {
		t.Fatalf("containerd harness: CNI plugins missing (Debian package containernetworking-plugins; hack/containerd/install.sh installs it): %v", err)
	}
	runc, err := exec.LookPath("runc")
	if err != nil {
		t.Fatalf("containerd harness: runc not found (Debian package runc; hack/containerd/install.sh installs it): %v", err)
	}
	if opts.PodCIDR == "" {
		opts.PodCIDR = defaultPodCIDR
	}
	if opts.PauseImage == "" {
		opts.PauseImage = defaultPauseImage
	}
	if opts.VMPodSandboxer == "" {
		opts.VMPodSandboxer = "podsandbox"
	}
	if opts.Release == Containerd17 && opts.VMPodSandboxer != "podsandbox" {
		t.Fatalf("containerd harness: %v has no sandboxer %q", opts.Release, opts.VMPodSandboxer)
	}
	if opts.LogLevel == "" {
		opts.LogLevel = "info"
	}
	if opts.CRITimeout == 0 {
		opts.CRITimeout = 2 * time.Minute
	}
	if opts.ReadyTimeout == 0 {
		opts.ReadyTimeout = 60 * time.Second
	}

	sweepStale(t)
	binDir := opts.BinDir
	if binDir == "" {
		binDir = installedBinDir(t, opts.Release)
	}
	pause := opts.PauseArchive
	if pause == "" {
		pause = builtPauseArchive(t)
	}

	root, err := os.MkdirTemp("/tmp", rootPrefix)
	if err != nil {
		t.Fatal(err)
	}
	id := filepath.Base(root)
	c := &Containerd{
		Root:         root,
		Address:      filepath.Join(root, "containerd.sock"),
		ConfigPath:   filepath.Join(root, "config.toml"),
		LogPath:      filepath.Join(root, "containerd.log"),
		LogDir:       newDirs(root).Logs,
		NetNSName:    id,
		NetNS:        filepath.Join("/run/netns", id),
		CgroupParent: "/" + id,
		PauseImage:   opts.PauseImage,
		PodCIDR:      opts.PodCIDR,
		BinDir:       binDir,
		Release:      opts.Release,
		opts:         opts,
	}
	c.Endpoint = "unix://" + c.Address
	c.inst = &instance{Root: root, NetNS: id, CgroupParent: c.CgroupParent}
	// The cleanup is registered before anything exists, so a failure from
	// here on still removes whatever was made.
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("containerd harness cleanup: %v", err)
		}
	})
	if err := c.inst.claim(); err != nil {
		t.Fatal(err)
	}

	if err := c.inst.setupNetNS(); err != nil {
		t.Fatal(err)
	}
	if err := c.inst.setupCgroups(); err != nil {
		t.Fatal(err)
	}
	if err := c.inst.startHolder(); err != nil {
		t.Fatal(err)
	}

	c.Snapshotter = opts.Snapshotter
	if c.Snapshotter == "" {
		c.Snapshotter = c.pickSnapshotter(t)
	}
	d := newDirs(root)
	for _, dir := range []string{d.Root, d.State, d.Temp, d.Opt, d.Runc, d.ShimSockets, d.CDI, d.CNIConf, d.CNIIPAM, d.Logs, d.Configs} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := renderConfig(configData{
		Release:        opts.Release,
		Dir:            d,
		Address:        c.Address,
		TTRPCAddress:   c.Address + ".ttrpc",
		LogLevel:       opts.LogLevel,
		Snapshotter:    c.Snapshotter,
		PauseImage:     opts.PauseImage,
		CNIBinDir:      cniBinDir,
		Runc:           runc,
		VMPodSandboxer: opts.VMPodSandboxer,
		Extra:          opts.ExtraConfig,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := writeFile(c.ConfigPath, cfg); err != nil {
		t.Fatal(err)
	}
	conflist, err := cniConflist(opts.PodCIDR, d.CNIIPAM)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeFile(filepath.Join(d.CNIConf, "10-vmpod-test.conflist"), conflist); err != nil {
		t.Fatal(err)
	}
	if err := writeFile(filepath.Join(root, "crictl.yaml"), []byte(fmt.Sprintf(
		"runtime-endpoint: %s\nimage-endpoint: %s\ntimeout: %d\npull-image-on-create: false\ndisable-pull-on-run: true\n",
		c.Endpoint, c.Endpoint, int(opts.CRITimeout.Seconds())))); err != nil {
		t.Fatal(err)
	}

	path := []string{binDir, "/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}
	if opts.ShimDir != "" {
		path = append([]string{opts.ShimDir}, path...)
	}
	c.env = append(filteredEnviron("PATH"), "PATH="+strings.Join(path, ":"))
	c.env = append(c.env, opts.Env...)
	if opts.VMDaemon != nil {
		d := *opts.VMDaemon
		c.opts.VMDaemon = &d
		c.daemonDefaults()
		c.env = append(c.env, "VMPOD_NODE_SOCKET="+c.DaemonSocket())
		c.StartDaemon(t)
	}

	c.start(t)
	c.ImportImage(t, pause)
	return c
}

// filteredEnviron is os.Environ without the named variables.
func filteredEnviron(drop ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		keep := true
		for _, d := range drop {
			if k == d {
				keep = false
			}
		}
		if keep {
			env = append(env, kv)
		}
	}
	return env
}

// start runs containerd inside the node's network namespace and the
// holder's mount namespace and waits until CRI is ready.
func (c *Containerd) start(t testing.TB) {
	t.Helper()
	logf, err := os.OpenFile(c.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	// This run's log starts here (the file collects every run).
	logStart, err := logf.Seek(0, io.SeekEnd)
	if err != nil {
		t.Fatal(err)
	}
	cmd, err := c.spawn(logf, filepath.Join(c.BinDir, "containerd"), "--config", c.ConfigPath)
	if err != nil {
		t.Fatalf("start containerd: %v", err)
	}
	exited := make(chan struct{})
	c.mu.Lock()
	c.cmd, c.exited = cmd, exited
	c.mu.Unlock()
	go func() {
		err := cmd.Wait()
		c.mu.Lock()
		c.waitErr = err
		c.mu.Unlock()
		close(exited)
	}()
	t.Logf("containerd: %v started, pid %d, root %s", c.Release, cmd.Process.Pid, c.Root)
	if err := c.waitReady(t, logStart); err != nil {
		t.Fatalf("containerd: %v\n--- last lines of %s ---\n%s", err, c.LogPath, tail(c.LogPath, 40))
	}
}

// spawn starts argv in the node's network namespace and the holder's
// mount namespace, in its own process group (a ^C to the test does not
// reach it, the cleanup stops it), with containerd's environment and its
// output to logf. nsenter execs argv, so cmd.Process is argv's process.
func (c *Containerd) spawn(logf *os.File, argv ...string) (*exec.Cmd, error) {
	cmd := exec.Command("nsenter", append([]string{"--target", strconv.Itoa(c.inst.HolderPID), "--mount", "--net", "--"}, argv...)...)
	cmd.Dir = c.Root
	cmd.Env = c.env
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd, cmd.Start()
}

// waitReady polls `crictl info` until the runtime and the network are ready.
func (c *Containerd) waitReady(t testing.TB, logStart int64) error {
	t.Helper()
	start := time.Now()
	deadline := start.Add(c.opts.ReadyTimeout)
	nextLog := start.Add(5 * time.Second)
	var last string
	for {
		select {
		case <-c.exited:
			return fmt.Errorf("exited while starting: %v", c.waitErr)
		default:
		}
		if _, err := os.Stat(c.Address); err == nil {
			out, err := c.crictl(5*time.Second, "info")
			if err == nil {
				ready, why := criReady(out)
				if ready {
					t.Logf("containerd: ready after %v", time.Since(start).Round(time.Millisecond))
					return nil
				}
				last = why
			} else {
				last = err.Error()
			}
		} else {
			last = "no socket yet"
			// A config containerd half-understood sends it to its default
			// socket: say so now rather than at the deadline.
			if strings.Contains(logSince(c.LogPath, logStart), "containerd successfully booted") {
				return fmt.Errorf("booted but not listening on %s (see \"serving...\" in its log)", c.Address)
			}
		}
		now := time.Now()
		if now.After(deadline) {
			return fmt.Errorf("not ready after %v: %s", c.opts.ReadyTimeout, last)
		}
		if now.After(nextLog) {
			t.Logf("containerd: waiting for CRI (%v): %s", now.Sub(start).Round(time.Second), last)
			nextLog = now.Add(5 * time.Second)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// criReady reads `crictl info`: both RuntimeReady and NetworkReady true.
func criReady(info string) (bool, string) {
	var v struct {
		Status struct {
			Conditions []struct {
				Type    string `json:"type"`
				Status  bool   `json:"status"`
				Reason  string `json:"reason"`
				Message string `json:"message"`
			} `json:"conditions"`
		} `json:"status"`
	}
	if err := json.Unmarshal([]byte(info), &v); err != nil {
		return false, "crictl info: " + err.Error()
	}
	want := map[string]bool{"RuntimeReady": false, "NetworkReady": false}
	var why []string
	for _, cond := range v.Status.Conditions {
		if _, ok := want[cond.Type]; ok {
			want[cond.Type] = cond.Status
			if !cond.Status {
				why = append(why, fmt.Sprintf("%s: %s %s", cond.Type, cond.Reason, cond.Message))
			}
		}
	}
	for k, ok := range want {
		if !ok && len(why) == 0 {
			why = append(why, k+" missing")
		}
	}
	return len(why) == 0, strings.Join(why, "; ")
}

// PID is the running containerd's process ID, or 0.
func (c *Containerd) PID() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd == nil || c.cmd.Process == nil {
		return 0
	}
	select {
	case <-c.exited:
		return 0
	default:
		return c.cmd.Process.Pid
	}
}

// HolderPID is the process that keeps the node's mount namespace; enter it
// (nsenter --target HolderPID --mount --net) to run something next to
// containerd, as a kubelet must.
func (c *Containerd) HolderPID() int { return c.inst.HolderPID }

// Restart stops containerd with SIGTERM, leaving the shims and their tasks
// running, and starts it again on the same root and config; containerd
// reconnects to the shims.
func (c *Containerd) Restart(t testing.TB) {
	t.Helper()
	if err := c.stop(20 * time.Second); err != nil {
		t.Fatalf("containerd: stop for restart: %v", err)
	}
	c.start(t)
}

// stop sends SIGTERM and waits up to grace, then SIGKILL.
func (c *Containerd) stop(grace time.Duration) error {
	c.mu.Lock()
	cmd, exited := c.cmd, c.exited
	c.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return nil
	}
	select {
	case <-exited:
		return nil
	default:
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	select {
	case <-exited:
		return nil
	case <-time.After(grace):
	}
	cmd.Process.Kill()
	select {
	case <-exited:
		return fmt.Errorf("containerd pid %d ignored SIGTERM for %v; killed", cmd.Process.Pid, grace)
	case <-time.After(10 * time.Second):
		return fmt.Errorf("containerd pid %d survives SIGKILL", cmd.Process.Pid)
	}
}

// Close stops containerd, kills every process it started (shims, runc
// containers, anything in the node's mount namespace or under
// CgroupParent), and removes the network namespace, the cgroup directories,
// the mounts and the root. It returns what could not be removed. The test's
// cleanup calls it; calling it again does nothing.
func (c *Containerd) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	var errs []error
	if err := c.stop(10 * time.Second); err != nil {
		errs = append(errs, err)
	}
	if err := c.stopDaemon(syscall.SIGTERM, 10*time.Second); err != nil {
		errs = append(errs, err)
	}
	if err := c.inst.teardown(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Command runs name inside the node's network namespace and containerd's
// mount namespace, where pod network namespace paths (under the state dir)
// resolve and the CRI streaming server (on the node's loopback) is reachable.
func (c *Containerd) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	argv := append([]string{"--target", strconv.Itoa(c.inst.HolderPID), "--mount", "--net", "--", name}, args...)
	cmd := exec.CommandContext(ctx, "nsenter", argv...)
	cmd.Env = c.env
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// Run runs Command with a bound and returns its stdout; the error carries
// stderr.
func (c *Containerd) Run(timeout time.Duration, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := c.Command(ctx, name, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// pickSnapshotter tries an overlay mount under the root, in the holder's
// mount namespace, and falls back to native.
func (c *Containerd) pickSnapshotter(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(c.Root, "overlay-probe")
	for _, d := range []string{"lower", "upper", "work", "merged"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	defer os.RemoveAll(dir)
	opts := fmt.Sprintf("lowerdir=%s/lower,upperdir=%s/upper,workdir=%s/work", dir, dir, dir)
	if _, err := c.Run(10*time.Second, "mount", "-t", "overlay", "overlay", "-o", opts, dir+"/merged"); err != nil {
		t.Logf("containerd: overlay mount failed, using the native snapshotter: %v", err)
		return "native"
	}
	if _, err := c.Run(10*time.Second, "umount", dir+"/merged"); err != nil {
		t.Fatalf("containerd: overlay probe: %v", err)
	}
	return "overlayfs"
}

// logSince returns the log from byte offset on.
func logSince(path string, offset int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return ""
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

// tail returns the last n lines of a file, for failure messages.
func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 64*1024), 1024*1024)
	for s.Scan() {
		lines = append(lines, s.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}
