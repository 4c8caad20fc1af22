package shim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"

	bootapi "github.com/containerd/containerd/api/runtime/bootstrap/v1"
	"github.com/containerd/containerd/api/types"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/shim"
	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/vmpod/vmpod/pkg/ocikeys"
)

// RuntimeName is the runtime_type containerd resolves to this shim's binary,
// containerd-shim-vmpod-v2.
const RuntimeName = "io.containerd.vmpod.v2"

// netnsEnv tells the long-lived shim which network namespace its start
// command put it in, so it can check before it touches any interface.
const netnsEnv = "VMPOD_NETNS"

// nodeNetnsEnv names the descriptor on which the start command hands the
// long-lived shim the network namespace it was started in (containerd's,
// the node's), for port-forward (portforward.go).
const nodeNetnsEnv = "VMPOD_NODE_NETNS_FD"

// Manager is the shim's bootstrap side: `start` launches (or finds) the
// pod's long-lived shim, `delete` cleans up after one that died.
type Manager struct {
	cfg Config
}

// NewManager returns the bootstrap side of the shim.
func NewManager(cfg Config) *Manager { return &Manager{cfg: cfg.withDefaults()} }

var _ shim.Shim = (*Manager)(nil)

// Name is the runtime name.
func (m *Manager) Name() string { return RuntimeName }

// Start runs in the task's bundle dir. It groups every task of a pod into
// one shim (by the CRI sandbox id) and starts that shim inside the pod's
// network namespace, where port-forward's catcher (portforward.go) must
// run, with the node's namespace in hand.
func (m *Manager) Start(ctx context.Context, params *bootapi.BootstrapParams) (_ *bootapi.BootstrapResult, retErr error) {
	result := &bootapi.BootstrapResult{Version: 3, Protocol: "ttrpc"}
	oci, err := readBundleSpec(".")
	if err != nil {
		return nil, err
	}
	group := params.GetInstanceID()
	if id := oci.Annotations[ocikeys.CRISandboxID]; id != "" {
		group = id
	}
	socketDir := params.GetSocketDir()
	if socketDir == "" {
		socketDir = filepath.Join(m.cfg.StateRoot, "s")
	}
	addr, err := shim.CreateSocketAddress(ctx, socketDir, params.GetContainerdGrpcAddress(), group, false)
	if err != nil {
		return nil, err
	}
	sock, err := shim.NewSocket(addr)
	if err != nil {
		if !shim.SocketEaddrinuse(err) {
			return nil, fmt.Errorf("shim socket: %w", err)
		}
		if shim.CanConnect(addr) {
			result.Address = addr // the pod's shim already runs
			return result, nil
		}
		if err := shim.RemoveSocket(addr); err != nil {
			return nil, fmt.Errorf("remove stale shim socket: %w", err)
		}
		if sock, err = shim.NewSocket(addr); err != nil {
			return nil, fmt.Errorf("shim socket: %w", err)
		}
	}
	defer func() {
		if retErr != nil {
			sock.Close()
			_ = shim.RemoveSocket(addr)
		}
	}()
	f, err := sock.File()
	if err != nil {
		return nil, err
	}
	defer f.Close()

	ns, err := namespaces.NamespaceRequired(ctx)
	if err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cwd, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	// os.Executable is vm-runtime even when containerd ran us through the
	// containerd-shim-vmpod-v2 link, so name the subcommand.
	args := []string{"shim", "-namespace", ns, "-id", params.GetInstanceID(), "-address", params.GetContainerdGrpcAddress()}
	if params.GetLogLevel() <= bootapi.LogLevel_LOG_LEVEL_DEBUG {
		args = append(args, "-debug")
	}
	cmd := exec.Command(self, args...)
	cmd.Dir = cwd
	cmd.ExtraFiles = []*os.File{f}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Env = os.Environ()

	netns := podNetns(oci)
	if netns != "" {
		cmd.Env = append(cmd.Env, netnsEnv+"="+netns)
		// This process is still in containerd's network namespace, the
		// node's: the shim forwards port-forward's connections from there.
		node, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			return nil, fmt.Errorf("the node's network namespace: %w", err)
		}
		defer node.Close()
		cmd.ExtraFiles = append(cmd.ExtraFiles, node)
		cmd.Env = append(cmd.Env, fmt.Sprintf("%s=%d", nodeNetnsEnv, 2+len(cmd.ExtraFiles)))
	}
	if err := startIn(cmd, netns); err != nil {
		return nil, err
	}
	defer func() {
		if retErr != nil {
			_ = cmd.Process.Kill()
		}
	}()
	go func() { _ = cmd.Wait() }()
	if err := shim.AdjustOOMScore(cmd.Process.Pid); err != nil {
		return nil, fmt.Errorf("shim OOM score: %w", err)
	}
	result.Address = addr
	return result, nil
}

// startIn starts cmd with its network namespace set to netns ("" keeps
// ours). The fork happens on a locked thread that joined netns, so the
// child starts there before it runs any code. The thread is not unlocked:
// it is in the wrong namespace for the rest of this process, and Go ends a
// thread whose goroutine exits locked.
func startIn(cmd *exec.Cmd, netns string) error {
	if netns == "" {
		return cmd.Start()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		fd, err := unix.Open(netns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- fmt.Errorf("pod network namespace %s: %v: %w", netns, err, errdefs.ErrNotFound)
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("enter pod network namespace %s: %w", netns, err)
			return
		}
		errc <- cmd.Start()
	}()
	return <-errc
}

// podNetns is the network namespace path in a bundle's spec; "" when the
// task shares the host's network or asks for a new namespace.
func podNetns(s *specs.Spec) string {
	if s.Linux == nil {
		return ""
	}
	for _, n := range s.Linux.Namespaces {
		if n.Type == specs.NetworkNamespace {
			return n.Path
		}
	}
	return ""
}

// readBundleSpec reads config.json of a bundle.
func readBundleSpec(bundle string) (*specs.Spec, error) {
	b, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		return nil, fmt.Errorf("bundle: %w", err)
	}
	var s specs.Spec
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("bundle config.json: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	return &s, nil
}

// Stop is the `delete` command: containerd runs it in a task's bundle after
// the task was deleted or its shim died. For a VM whose shim died it
// destroys the VM and removes everything the shim made.
func (m *Manager) Stop(ctx context.Context, id string) (shim.StopStatus, error) {
	cwd, err := os.Getwd()
	if err != nil {
		return shim.StopStatus{}, err
	}
	bundle := filepath.Join(filepath.Dir(cwd), id)
	status := shim.StopStatus{ExitStatus: 128 + int(unix.SIGKILL)}
	if err := cleanupAfterShim(ctx, m.cfg, bundle, id); err != nil && !errors.Is(err, os.ErrNotExist) {
		return status, err
	}
	return status, nil
}

// Info reports what this runtime is.
func (m *Manager) Info(ctx context.Context, optionsR io.Reader) (*types.RuntimeInfo, error) {
	return &types.RuntimeInfo{Name: RuntimeName}, nil
}
