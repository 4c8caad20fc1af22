package daemon

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"

	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"github.com/containerd/log"
	"github.com/containerd/ttrpc"
	"github.com/containerd/typeurl/v2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/protobuf/types/known/emptypb"

	node "github.com/vmpod/vmpod/api/node/v1"
	"github.com/vmpod/vmpod/pkg/vm"
	"github.com/vmpod/vmpod/pkg/vmd"
)

// Server is the node API over the node's VMs.
type Server struct {
	vms *vmd.Service
	// epoch names this process in console offsets.
	epoch string

	mu       sync.Mutex
	consoles map[string]*console
	execs    map[string]context.CancelFunc // by <id>/<exec id>
}

var _ node.VMsService = &Server{}

// New serves vms. Call Recover before Serve.
func New(vms *vmd.Service) *Server {
	b := make([]byte, 8)
	rand.Read(b) //nolint:errcheck // crypto/rand does not fail on Linux
	return &Server{vms: vms, epoch: hex.EncodeToString(b), consoles: map[string]*console{}, execs: map[string]context.CancelFunc{}}
}

// Recover takes over the VMs an earlier daemon left (vmd.Service.Recover);
// a VM taken over writes its console into a new backlog. Then the stopped
// VMs of pods that no shim serves any more, and those pods, are released
// (vmd.Service.ReleaseOrphans): after a reboot nobody else would.
func (s *Server) Recover(ctx context.Context) {
	s.vms.Recover(ctx, func(r vmd.Record) (io.Writer, error) { return s.newConsole(r.ID), nil })
	pods, err := servedPods("/proc")
	if err != nil {
		log.G(ctx).WithError(err).Warn("list the shims: VMs of pods no shim serves are kept")
		return
	}
	if released := s.vms.ReleaseOrphans(ctx, func(id string) bool { return owns(pods, id) }); len(released) > 0 {
		log.G(ctx).Infof("released %d pod(s) that no shim serves any more: %v", len(released), released)
	}
}

// Serve serves the node API on a unix socket at path, which only root may
// open, until ctx ends. Running VMs keep running when it returns.
func (s *Server) Serve(ctx context.Context, path string) error {
	if !filepath.IsAbs(path) {
		return fmt.Errorf("node API socket %q: want an absolute path: %w", path, errdefs.ErrInvalidArgument)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return err
	}
	srv, err := ttrpc.NewServer(ttrpc.WithUnaryServerInterceptor(errorInterceptor))
	if err != nil {
		l.Close()
		return err
	}
	node.RegisterVMsService(srv, s)
	conns := &connTracker{Listener: l, open: map[net.Conn]struct{}{}}
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		<-ctx.Done()
		srv.Close()
		// ttrpc's Close only asks each connection to end; a request
		// already read would still be answered. Like a daemon that
		// exits, Serve returns with none left.
		conns.closeAll()
	}()
	log.G(ctx).Infof("node API listening on %s", path)
	err = srv.Serve(ctx, conns)
	if ctx.Err() != nil {
		<-closed
	}
	if errors.Is(err, ttrpc.ErrServerClosed) {
		err = nil
	}
	return err
}

// connTracker is a listener that keeps the connections it accepted, to
// close them all when the server stops.
type connTracker struct {
	net.Listener
	mu     sync.Mutex
	open   map[net.Conn]struct{}
	closed bool
}

func (t *connTracker) Accept() (net.Conn, error) {
	c, err := t.Listener.Accept()
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		c.Close()
		return nil, net.ErrClosed
	}
	tc := &trackedConn{Conn: c, t: t}
	t.open[tc] = struct{}{}
	return tc, nil
}

func (t *connTracker) closeAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	for c := range t.open {
		c.(*trackedConn).Conn.Close()
		delete(t.open, c)
	}
}

type trackedConn struct {
	net.Conn
	t *connTracker
}

func (c *trackedConn) Close() error {
	c.t.mu.Lock()
	delete(c.t.open, c)
	c.t.mu.Unlock()
	return c.Conn.Close()
}

// errorInterceptor is where errors become ttrpc status codes: the class
// the code wrapped (errdefs) picks the code.
func errorInterceptor(ctx context.Context, unmarshal ttrpc.Unmarshaler, _ *ttrpc.UnaryServerInfo, method ttrpc.Method) (any, error) {
	resp, err := method(ctx, unmarshal)
	if err != nil {
		return resp, errgrpc.ToGRPC(err)
	}
	return resp, nil
}

func (s *Server) newConsole(id string) *console {
	c := newConsole()
	s.keepConsole(id, c)
	return c
}

// keepConsole holds c as the console of the VM id, which is on the node,
// until the VM stopped and its last lines are out.
func (s *Server) keepConsole(id string, c *console) {
	s.mu.Lock()
	s.consoles[id] = c
	s.mu.Unlock()
	go func() {
		s.vms.Wait(context.Background(), id) //nolint:errcheck // NotFound: the VM is gone, so is its console
		c.close()
	}()
}

func (s *Server) console(id string) (*console, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.consoles[id]; c != nil {
		return c, nil
	}
	return nil, fmt.Errorf("VM %q has no console here: %w", id, errdefs.ErrNotFound)
}

var empty = &emptypb.Empty{}

// Create makes the VM from the container's OCI spec (vmd.FromOCI).
func (s *Server) Create(ctx context.Context, r *node.CreateRequest) (*emptypb.Empty, error) {
	var oci specs.Spec
	if err := json.Unmarshal(r.Spec, &oci); err != nil {
		return nil, fmt.Errorf("VM %s: its OCI spec: %v: %w", r.Id, err, errdefs.ErrInvalidArgument)
	}
	mounts := make([]mount.Mount, 0, len(r.Rootfs))
	for _, m := range r.Rootfs {
		mounts = append(mounts, mount.Mount{Type: m.Type, Source: m.Source, Target: m.Target, Options: m.Options})
	}
	req, err := vmd.FromOCI(r.Id, r.PodId, &oci, r.Bundle, mounts, r.Netns, s.vms.MountRules())
	if err != nil {
		return nil, err
	}
	c := newConsole()
	req.Console = c
	if err := s.vms.Create(ctx, req); err != nil {
		return nil, err
	}
	s.keepConsole(r.Id, c)
	return empty, nil
}

func (s *Server) Start(ctx context.Context, r *node.IDRequest) (*node.StartResponse, error) {
	pid, err := s.vms.Start(ctx, r.Id)
	if err != nil {
		return nil, err
	}
	return &node.StartResponse{Pid: uint32(pid)}, nil
}

func (s *Server) Wait(ctx context.Context, r *node.IDRequest) (*node.Exit, error) {
	exit, err := s.vms.Wait(ctx, r.Id)
	if err != nil {
		return nil, err
	}
	rec, err := s.vms.Get(r.Id)
	if err != nil {
		return nil, err
	}
	return &node.Exit{Status: exit.Status, Reason: exit.Reason, Message: exit.Message, ExitedAtUnixNano: rec.FinishedAt}, nil
}

func (s *Server) Shutdown(ctx context.Context, r *node.IDRequest) (*emptypb.Empty, error) {
	return empty, s.vms.Shutdown(ctx, r.Id)
}

// Kill stops the VM hard; a created one ends at once with 128+signal.
func (s *Server) Kill(ctx context.Context, r *node.KillRequest) (*emptypb.Empty, error) {
	if r.Signal == 0 || r.Signal > 64 {
		return nil, fmt.Errorf("kill VM %s: signal %d: want 1 to 64: %w", r.Id, r.Signal, errdefs.ErrInvalidArgument)
	}
	return empty, s.vms.Kill(ctx, r.Id, vmd.Exit{Status: 128 + r.Signal, Reason: "NotStarted",
		Message: fmt.Sprintf("killed with signal %d before it started", r.Signal)})
}

// Remove forgets the VM and its console.
func (s *Server) Remove(ctx context.Context, r *node.IDRequest) (*emptypb.Empty, error) {
	if err := s.vms.Remove(ctx, r.Id); err != nil {
		return nil, err
	}
	s.mu.Lock()
	if c := s.consoles[r.Id]; c != nil {
		c.close()
		delete(s.consoles, r.Id)
	}
	s.mu.Unlock()
	return empty, nil
}

func (s *Server) ReleasePod(ctx context.Context, r *node.ReleasePodRequest) (*emptypb.Empty, error) {
	if r.PodId == "" {
		return nil, fmt.Errorf("release a pod: no pod id: %w", errdefs.ErrInvalidArgument)
	}
	return empty, s.vms.ReleasePod(ctx, r.PodId)
}

func (s *Server) Get(ctx context.Context, r *node.IDRequest) (*node.VM, error) {
	rec, err := s.vms.Get(r.Id)
	if err != nil {
		return nil, err
	}
	out := &node.VM{Id: rec.ID, PodId: rec.PodID, State: string(rec.State)}
	if rec.State == vmd.Stopped {
		out.Exit = &node.Exit{Status: rec.Exit.Status, Reason: rec.Exit.Reason, Message: rec.Exit.Message, ExitedAtUnixNano: rec.FinishedAt}
	}
	return out, nil
}

func (s *Server) Pause(ctx context.Context, r *node.IDRequest) (*emptypb.Empty, error) {
	return empty, s.vms.Pause(ctx, r.Id)
}

func (s *Server) Resume(ctx context.Context, r *node.IDRequest) (*emptypb.Empty, error) {
	return empty, s.vms.Resume(ctx, r.Id)
}

func (s *Server) Update(ctx context.Context, r *node.UpdateRequest) (*emptypb.Empty, error) {
	var res specs.LinuxResources
	if r.Resources != nil {
		if err := typeurl.UnmarshalTo(r.Resources, &res); err != nil {
			return nil, fmt.Errorf("update VM %s: resources: %v: %w", r.Id, err, errdefs.ErrInvalidArgument)
		}
	}
	return empty, s.vms.Update(ctx, r.Id, &res)
}

func (s *Server) Checkpoint(ctx context.Context, r *node.CheckpointRequest) (*node.CheckpointResponse, error) {
	res, err := s.vms.Checkpoint(ctx, r.Id, r.Dir)
	if err != nil {
		return nil, err
	}
	return &node.CheckpointResponse{PausedNanos: int64(res.Paused)}, nil
}

func (s *Server) Stats(ctx context.Context, r *node.IDRequest) (*node.StatsResponse, error) {
	m, _, err := s.vms.Stats(r.Id)
	if err != nil {
		return nil, err
	}
	a, err := typeurl.MarshalAnyToProto(m)
	if err != nil {
		return nil, fmt.Errorf("VM %s: stats: %v: %w", r.Id, err, errdefs.ErrInternal)
	}
	return &node.StatsResponse{Stats: a}, nil
}

// execOutputChunk is the most of a stream one ExecOutput carries (ttrpc's
// messages are at most 4 MiB).
const execOutputChunk = 1 << 20

// Exec runs the command (vmd.Service.Exec) and sends its output, then
// its exit code.
func (s *Server) Exec(ctx context.Context, r *node.ExecRequest, ss node.VMs_ExecServer) error {
	if len(r.Args) == 0 {
		return errgrpc.ToGRPC(fmt.Errorf("exec in %s: no command: %w", r.Id, errdefs.ErrInvalidArgument))
	}
	if len(r.Stdin) > node.MaxExecStdin {
		return errgrpc.ToGRPC(fmt.Errorf("exec in %s: stdin is %d bytes, over %d: the QEMU guest agent takes it in one message: %w",
			r.Id, len(r.Stdin), node.MaxExecStdin, errdefs.ErrInvalidArgument))
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	key := r.Id + "/" + r.ExecId
	s.mu.Lock()
	if _, dup := s.execs[key]; dup && r.ExecId != "" {
		s.mu.Unlock()
		return errgrpc.ToGRPC(fmt.Errorf("exec %s in %s: %w", r.ExecId, r.Id, errdefs.ErrAlreadyExists))
	}
	s.execs[key] = cancel
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.execs, key)
		s.mu.Unlock()
	}()
	res, err := s.vms.Exec(ctx, r.Id, vm.ExecRequest{Args: r.Args, Env: r.Env, Stdin: r.Stdin})
	if err != nil {
		return errgrpc.ToGRPC(err)
	}
	for _, out := range []struct {
		data   []byte
		stderr bool
	}{{res.Stdout, false}, {res.Stderr, true}} {
		for b := out.data; len(b) > 0; {
			n := min(len(b), execOutputChunk)
			m := &node.ExecOutput{Stdout: b[:n]}
			if out.stderr {
				m = &node.ExecOutput{Stderr: b[:n]}
			}
			if err := ss.Send(m); err != nil {
				return err
			}
			b = b[n:]
		}
	}
	return ss.Send(&node.ExecOutput{Exited: true, ExitCode: int32(res.ExitCode)})
}

// CancelExec ends an exec in flight; one that is not is no error.
func (s *Server) CancelExec(ctx context.Context, r *node.CancelExecRequest) (*emptypb.Empty, error) {
	s.mu.Lock()
	cancel := s.execs[r.Id+"/"+r.ExecId]
	s.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	return empty, nil
}

// Console streams the VM's console from the client's offset (or from the
// oldest byte held, for a client of another daemon) until it ends.
func (s *Server) Console(ctx context.Context, r *node.ConsoleRequest, ss node.VMs_ConsoleServer) error {
	c, err := s.console(r.Id)
	if err != nil {
		return errgrpc.ToGRPC(err)
	}
	offset := r.Offset
	if r.Epoch != s.epoch {
		offset = 0
	}
	for {
		data, end, skipped, done, more := c.next(offset)
		if len(data) > 0 {
			if err := ss.Send(&node.ConsoleChunk{Data: data, Epoch: s.epoch, Offset: end, Skipped: skipped}); err != nil {
				return err
			}
			offset = end
			continue
		}
		if done {
			return ss.Send(&node.ConsoleChunk{Epoch: s.epoch, Offset: offset, End: true})
		}
		select {
		case <-more:
		case <-ctx.Done():
			return errgrpc.ToGRPC(ctx.Err())
		}
	}
}

// ConsoleInput writes to the VM's serial console.
func (s *Server) ConsoleInput(ctx context.Context, r *node.ConsoleInputRequest) (*emptypb.Empty, error) {
	w, err := s.vms.ConsoleInput(r.Id)
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(r.Data); err != nil {
		return nil, fmt.Errorf("VM %s: console input: %v: %w", r.Id, err, errdefs.ErrUnavailable)
	}
	return empty, nil
}
