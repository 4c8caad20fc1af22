package remote

import (
	"context"
	"io"
	"net/rpc"
	"net/rpc/jsonrpc"
	"sync"

	"github.com/containerd/errdefs"

	"github.com/vmpod/vmpod/pkg/virt"
)

// Sockets is what a Hypervisor that runs QEMU tells about a running
// domain, so that a Client can watch its QEMU and reach its guest agent
// while no helper runs (libvirt.Conn implements it).
type Sockets interface {
	// Sockets are the paths of the QMP socket of the domain's QEMU, of
	// its guest agent channel ("" if none) and of the domain's log, where
	// libvirt writes "shutting down, reason=..." when it stops QEMU.
	Sockets(name string) (monitor, agent, log string, err error)
}

// Serve answers one Client's calls on conn with hv until the Client hangs
// up. hv is opened by open, whose error the Client's first call reports.
// Serve neither closes hv nor conn.
func Serve(conn io.ReadWriteCloser, hv virt.Hypervisor, openErr error) {
	s := &server{hv: hv, openErr: openErr}
	if hv != nil {
		s.events = newPoller(hv.Events())
	}
	srv := rpc.NewServer()
	if err := srv.RegisterName("Hypervisor", s); err != nil {
		panic(err) // the method set is fixed: a programming error
	}
	// ServeCodec waits for the calls in flight once the Client hung up:
	// a waiting Events call must end then.
	srv.ServeCodec(jsonrpc.NewServerCodec(hangUpConn{conn, func() {
		if s.events != nil {
			s.events.hangUp()
		}
	}}))
}

// hangUpConn calls onEnd when reading fails: the Client hung up.
type hangUpConn struct {
	io.ReadWriteCloser
	onEnd func()
}

func (c hangUpConn) Read(p []byte) (int, error) {
	n, err := c.ReadWriteCloser.Read(p)
	if err != nil {
		c.onEnd()
	}
	return n, err
}

type server struct {
	hv      virt.Hypervisor
	openErr error
	events  *poller
}

// do runs f with the Request's deadline, unless the hypervisor never opened.
func (s *server) do(req *Request, rep *Reply, f func(ctx context.Context) error) error {
	if s.hv == nil {
		rep.Err = toWire(s.openErr)
		return nil
	}
	ctx, cancel := req.context()
	defer cancel()
	rep.Err = toWire(f(ctx))
	return nil
}

// Hello reports whether the helper opened its hypervisor.
func (s *server) Hello(req *Request, rep *Reply) error {
	return s.do(req, rep, func(context.Context) error { return nil })
}

func (s *server) Capabilities(req *Request, rep *Reply) error {
	return s.do(req, rep, func(ctx context.Context) (err error) {
		rep.Caps, rep.DomCaps, err = s.hv.Capabilities(ctx, req.VirtType)
		return err
	})
}

func (s *server) Define(req *Request, rep *Reply) error {
	return s.do(req, rep, func(ctx context.Context) error { return s.hv.Define(ctx, req.XML) })
}

func (s *server) Start(req *Request, rep *Reply) error {
	return s.do(req, rep, func(ctx context.Context) error {
		return s.hv.Start(ctx, req.Name, virt.StartOptions{Paused: req.Paused})
	})
}

func (s *server) Resume(req *Request, rep *Reply) error {
	return s.do(req, rep, func(ctx context.Context) error { return s.hv.Resume(ctx, req.Name) })
}

func (s *server) Suspend(req *Request, rep *Reply) error {
	return s.do(req, rep, func(ctx context.Context) error { return s.hv.Suspend(ctx, req.Name) })
}

func (s *server) SetMemoryHardLimit(req *Request, rep *Reply) error {
	return s.do(req, rep, func(ctx context.Context) error {
		return s.hv.SetMemoryHardLimit(ctx, req.Name, req.Bytes)
	})
}

func (s *server) Shutdown(req *Request, rep *Reply) error {
	return s.do(req, rep, func(ctx context.Context) error { return s.hv.Shutdown(ctx, req.Name) })
}

func (s *server) Destroy(req *Request, rep *Reply) error {
	return s.do(req, rep, func(ctx context.Context) error { return s.hv.Destroy(ctx, req.Name) })
}

func (s *server) Undefine(req *Request, rep *Reply) error {
	return s.do(req, rep, func(ctx context.Context) error { return s.hv.Undefine(ctx, req.Name) })
}

func (s *server) Info(req *Request, rep *Reply) error {
	return s.do(req, rep, func(ctx context.Context) (err error) {
		rep.Info, err = s.hv.Info(ctx, req.Name)
		return err
	})
}

func (s *server) Stats(req *Request, rep *Reply) error {
	return s.do(req, rep, func(ctx context.Context) (err error) {
		rep.Stats, err = s.hv.Stats(ctx, req.Name)
		return err
	})
}

func (s *server) AgentCommand(req *Request, rep *Reply) error {
	return s.do(req, rep, func(ctx context.Context) (err error) {
		rep.Text, err = s.hv.AgentCommand(ctx, req.Name, req.Command, req.Timeout)
		return err
	})
}

func (s *server) List(req *Request, rep *Reply) error {
	return s.do(req, rep, func(ctx context.Context) (err error) {
		rep.Names, err = s.hv.List(ctx)
		return err
	})
}

// Sockets are the QMP socket and guest agent channel of a running
// domain's QEMU.
func (s *server) Sockets(req *Request, rep *Reply) error {
	return s.do(req, rep, func(context.Context) (err error) {
		m, ok := s.hv.(Sockets)
		if !ok {
			return errdefs.ErrNotImplemented
		}
		rep.Text, rep.Agent, rep.Log, err = m.Sockets(req.Name)
		return err
	})
}

// Release closes the hypervisor and hands over every event it sent until
// then: the Client's last call, so that a domain that stopped while the
// helper was going is not lost between libvirt and the Client's watch.
func (s *server) Release(req *Request, rep *Reply) error {
	return s.do(req, rep, func(context.Context) error {
		err := s.hv.Close()
		rep.Events = s.events.drain()
		return err
	})
}

// Events hands over the events queued since the last call; with req.Wait
// it blocks until there is one or the hypervisor is closed.
func (s *server) Events(req *Request, rep *Reply) error {
	return s.do(req, rep, func(context.Context) error {
		rep.Events, rep.Closed = s.events.take(req.Wait)
		return nil
	})
}

// poller queues a Hypervisor's events for Events calls; it reads the
// channel all the time, as virt.Hypervisor asks.
type poller struct {
	mu     sync.Mutex
	cond   *sync.Cond
	queue  []virt.Event
	closed bool // the hypervisor's events ended
	gone   bool // the Client hung up
}

func newPoller(ch <-chan virt.Event) *poller {
	p := &poller{}
	p.cond = sync.NewCond(&p.mu)
	go func() {
		for ev := range ch {
			p.mu.Lock()
			p.queue = append(p.queue, ev)
			p.cond.Broadcast()
			p.mu.Unlock()
		}
		p.mu.Lock()
		p.closed = true
		p.cond.Broadcast()
		p.mu.Unlock()
	}()
	return p
}

// hangUp ends a waiting take: no one will read its answer.
func (p *poller) hangUp() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gone = true
	p.cond.Broadcast()
}

// drain waits for the closed hypervisor's last event and returns what is
// queued.
func (p *poller) drain() []virt.Event {
	p.mu.Lock()
	defer p.mu.Unlock()
	for !p.closed {
		p.cond.Wait()
	}
	evs := p.queue
	p.queue = nil
	return evs
}

func (p *poller) take(wait bool) ([]virt.Event, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for wait && len(p.queue) == 0 && !p.closed && !p.gone {
		p.cond.Wait()
	}
	evs := p.queue
	p.queue = nil
	return evs, p.closed && len(evs) == 0
}
