package nodeclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"github.com/containerd/ttrpc"
	"google.golang.org/protobuf/types/known/anypb"

	node "github.com/vmpod/vmpod/api/node/v1"
)

// Client calls the node daemon on one socket. It is safe for concurrent
// use.
type Client struct {
	socket string

	mu   sync.Mutex
	conn *ttrpc.Client // nil until dialled, and after it broke
}

// New is a client of the daemon at socket; nothing is dialled yet.
func New(socket string) *Client { return &Client{socket: socket} }

// Close hangs up.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == nil {
		return nil
	}
	err := c.conn.Close()
	c.conn = nil
	return err
}

// vms is the API on the current connection, dialled if there is none.
func (c *Client) vms(ctx context.Context) (node.VMsClient, *ttrpc.Client, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == nil {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "unix", c.socket)
		if err != nil {
			return nil, nil, fmt.Errorf("the node daemon (vm-runtime daemon) does not answer on %s: %v: %w", c.socket, err, errdefs.ErrUnavailable)
		}
		c.conn = ttrpc.NewClient(conn)
	}
	return node.NewVMsClient(c.conn), c.conn, nil
}

// call runs f on the API and turns its error into its errdefs class; a
// broken connection is dropped, for the next call to dial again, and is
// Unavailable.
func (c *Client) call(ctx context.Context, f func(node.VMsClient) error) error {
	api, conn, err := c.vms(ctx)
	if err != nil {
		return err
	}
	err = f(api)
	if err == nil {
		return nil
	}
	if broken(err) || (ctx.Err() == nil && errdefs.IsCanceled(errgrpc.ToNative(err))) {
		// The connection broke, or the daemon cancelled the call: it
		// is stopping.
		c.mu.Lock()
		if c.conn == conn {
			c.conn.Close()
			c.conn = nil
		}
		c.mu.Unlock()
		return fmt.Errorf("the node daemon went away on %s: %v: %w", c.socket, err, errdefs.ErrUnavailable)
	}
	return errgrpc.ToNative(err)
}

// broken says whether err came from the connection rather than the
// daemon's answer.
func broken(err error) bool {
	return errors.Is(err, ttrpc.ErrClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed)
}

// retryEvery is how often a call that waits for the daemon tries again.
const retryEvery = 500 * time.Millisecond

// untilAnswered runs f until it returns anything but Unavailable, or ctx
// ends.
func (c *Client) untilAnswered(ctx context.Context, f func(node.VMsClient) error) error {
	for {
		err := c.call(ctx, f)
		if !errdefs.IsUnavailable(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (waiting for the node daemon: %v)", ctx.Err(), err)
		case <-time.After(retryEvery):
		}
	}
}

func (c *Client) Create(ctx context.Context, r *node.CreateRequest) error {
	return c.call(ctx, func(api node.VMsClient) error { _, err := api.Create(ctx, r); return err })
}

// Start boots the VM and returns QEMU's pid.
func (c *Client) Start(ctx context.Context, id string) (uint32, error) {
	var pid uint32
	err := c.call(ctx, func(api node.VMsClient) error {
		r, err := api.Start(ctx, &node.IDRequest{Id: id})
		if err == nil {
			pid = r.Pid
		}
		return err
	})
	return pid, err
}

// Wait returns the VM's exit once it stopped, waiting for the daemon to
// come back when it is away.
func (c *Client) Wait(ctx context.Context, id string) (*node.Exit, error) {
	var exit *node.Exit
	err := c.untilAnswered(ctx, func(api node.VMsClient) error {
		var err error
		exit, err = api.Wait(ctx, &node.IDRequest{Id: id})
		return err
	})
	return exit, err
}

func (c *Client) Shutdown(ctx context.Context, id string) error {
	return c.call(ctx, func(api node.VMsClient) error { _, err := api.Shutdown(ctx, &node.IDRequest{Id: id}); return err })
}

func (c *Client) Kill(ctx context.Context, id string, signal uint32) error {
	return c.call(ctx, func(api node.VMsClient) error {
		_, err := api.Kill(ctx, &node.KillRequest{Id: id, Signal: signal})
		return err
	})
}

func (c *Client) Remove(ctx context.Context, id string) error {
	return c.call(ctx, func(api node.VMsClient) error { _, err := api.Remove(ctx, &node.IDRequest{Id: id}); return err })
}

func (c *Client) ReleasePod(ctx context.Context, podID string) error {
	return c.call(ctx, func(api node.VMsClient) error {
		_, err := api.ReleasePod(ctx, &node.ReleasePodRequest{PodId: podID})
		return err
	})
}

func (c *Client) Get(ctx context.Context, id string) (*node.VM, error) {
	var vm *node.VM
	err := c.call(ctx, func(api node.VMsClient) error {
		var err error
		vm, err = api.Get(ctx, &node.IDRequest{Id: id})
		return err
	})
	return vm, err
}

// ExecResult is what a command in the guest did.
type ExecResult struct {
	ExitCode       int32
	Stdout, Stderr []byte
}

// cancelWait bounds how long a cancelled Exec waits for the daemon to
// end the command in the guest.
const cancelWait = 15 * time.Second

// Exec runs a command in the guest and gathers its output. ctx's end
// cancels it in the daemon, which kills it in the guest; Exec returns
// once that is done (or after cancelWait), so whoever cancelled finds the
// command gone.
func (c *Client) Exec(ctx context.Context, r *node.ExecRequest) (ExecResult, error) {
	var res ExecResult
	err := c.call(ctx, func(api node.VMsClient) error {
		// The stream outlives ctx until the daemon ended the command.
		sctx, scancel := context.WithCancel(context.WithoutCancel(ctx))
		defer scancel()
		st, err := api.Exec(sctx, r)
		if err != nil {
			return err
		}
		stop := context.AfterFunc(ctx, func() {
			time.AfterFunc(cancelWait, scancel)
			// ttrpc does not carry a cancel: say it.
			cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			api.CancelExec(cctx, &node.CancelExecRequest{Id: r.Id, ExecId: r.ExecId}) //nolint:errcheck // the exec ends either way
		})
		defer stop()
		for {
			out, err := st.Recv()
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return err
			}
			res.Stdout = append(res.Stdout, out.Stdout...)
			res.Stderr = append(res.Stderr, out.Stderr...)
			if out.Exited {
				res.ExitCode = out.ExitCode
				return nil
			}
		}
	})
	return res, err
}

// lostNote is written into the console where output was lost.
const lostNote = "\r\n[vmpod: the node daemon restarted here; console output of that moment may be lost]\r\n"

// Console copies the VM's console to w until it ends (nil) or ctx ends;
// across the daemon's restarts it resumes where it was, writing lostNote
// where output was lost.
func (c *Client) Console(ctx context.Context, id string, w io.Writer) error {
	var epoch string
	var offset uint64
	return c.untilAnswered(ctx, func(api node.VMsClient) error {
		st, err := api.Console(ctx, &node.ConsoleRequest{Id: id, Epoch: epoch, Offset: offset})
		if err != nil {
			return err
		}
		for {
			chunk, err := st.Recv()
			if err != nil {
				return err // io.EOF too: the stream broke before the end
			}
			if chunk.End {
				return nil
			}
			if chunk.Skipped || (epoch != "" && chunk.Epoch != epoch && offset > 0) {
				if _, err := io.WriteString(w, lostNote); err != nil {
					return fmt.Errorf("console: %v: %w", err, errdefs.ErrUnknown)
				}
			}
			epoch, offset = chunk.Epoch, chunk.Offset
			if _, err := w.Write(chunk.Data); err != nil {
				return fmt.Errorf("console: %v: %w", err, errdefs.ErrUnknown)
			}
		}
	})
}

func (c *Client) ConsoleInput(ctx context.Context, id string, data []byte) error {
	return c.call(ctx, func(api node.VMsClient) error {
		_, err := api.ConsoleInput(ctx, &node.ConsoleInputRequest{Id: id, Data: data})
		return err
	})
}

func (c *Client) Pause(ctx context.Context, id string) error {
	return c.call(ctx, func(api node.VMsClient) error { _, err := api.Pause(ctx, &node.IDRequest{Id: id}); return err })
}

func (c *Client) Resume(ctx context.Context, id string) error {
	return c.call(ctx, func(api node.VMsClient) error { _, err := api.Resume(ctx, &node.IDRequest{Id: id}); return err })
}

// Update applies resources (the OCI LinuxResources, as containerd's task
// Update carries them) to the running VM.
func (c *Client) Update(ctx context.Context, id string, resources *anypb.Any) error {
	return c.call(ctx, func(api node.VMsClient) error {
		_, err := api.Update(ctx, &node.UpdateRequest{Id: id, Resources: resources})
		return err
	})
}

// Checkpoint has the daemon write the running VM's state into dir, an
// empty dir on the node, and returns how long the guest was paused.
func (c *Client) Checkpoint(ctx context.Context, id, dir string) (time.Duration, error) {
	var paused time.Duration
	err := c.call(ctx, func(api node.VMsClient) error {
		r, err := api.Checkpoint(ctx, &node.CheckpointRequest{Id: id, Dir: dir})
		if err == nil {
			paused = time.Duration(r.PausedNanos)
		}
		return err
	})
	return paused, err
}

// Stats are the cgroup metrics of the VM's QEMU, as containerd's task
// Stats carries them.
func (c *Client) Stats(ctx context.Context, id string) (*anypb.Any, error) {
	var stats *anypb.Any
	err := c.call(ctx, func(api node.VMsClient) error {
		r, err := api.Stats(ctx, &node.IDRequest{Id: id})
		if err == nil {
			stats = r.Stats
		}
		return err
	})
	return stats, err
}
