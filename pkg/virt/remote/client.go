package remote

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/rpc"
	"net/rpc/jsonrpc"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"

	"github.com/vmpod/vmpod/pkg/virt"
)

// DefaultIdle is how long a helper stays after its last call.
const DefaultIdle = 5 * time.Second

// Helper is one started helper process: the connection its Serve answers
// on, and how to wait for it (after the connection closed, it closes its
// hypervisor and exits) or, if it does not exit, kill it.
type Helper struct {
	Conn io.ReadWriteCloser
	Wait func() error
	Kill func()
}

// Options tune a Client.
type Options struct {
	// Spawn starts a helper (Exec makes one from a command).
	Spawn func(ctx context.Context) (Helper, error)
	// Idle is how long a helper stays without a call (DefaultIdle if 0).
	Idle time.Duration
}

// Client is a virt.Hypervisor whose calls run in a helper it starts on
// demand (see the package doc).
type Client struct {
	opts   Options
	events *eventQueue

	mu       sync.Mutex
	sess     *session
	inflight int
	idleGen  int  // which armed idle timer is current
	settle   bool // Settle came while calls were in flight
	watches  map[string]*watch
	closed   bool
	// direct counts guest agent calls made on the agent's socket while no
	// helper runs; directDone signals when one ends.
	direct     int
	directDone *sync.Cond

	runMu   sync.Mutex
	running map[string]bool // domains whose QEMU runs, from the events
}

type session struct {
	rpc    *rpc.Client
	helper Helper
	pumped chan struct{} // closed when the event pump stopped
	ending atomic.Bool   // hung up on purpose
	ended  sync.Once
}

// Open starts the first helper, which opens the hypervisor: its error, if
// any, is Open's.
func Open(ctx context.Context, opts Options) (*Client, error) {
	if opts.Idle <= 0 {
		opts.Idle = DefaultIdle
	}
	c := &Client{opts: opts, events: newEventQueue(), watches: map[string]*watch{}, running: map[string]bool{}}
	c.directDone = sync.NewCond(&c.mu)
	s, err := c.acquire(ctx)
	if err != nil {
		c.events.close()
		return nil, err
	}
	c.done(s)
	return c, nil
}

// acquire returns the live session, starting a helper if none runs, and
// counts a call in flight.
func (c *Client) acquire(ctx context.Context) (*session, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, fmt.Errorf("hypervisor connection closed: %w", errdefs.ErrFailedPrecondition)
	}
	for c.sess == nil && c.direct > 0 {
		// A guest agent call goes directly to the agent's socket, which
		// libvirt connects to when it opens: it ends first.
		c.directDone.Wait()
	}
	if c.closed {
		return nil, fmt.Errorf("hypervisor connection closed: %w", errdefs.ErrFailedPrecondition)
	}
	if c.sess == nil {
		handed := c.unwatchLocked()
		s, err := c.spawn(ctx)
		if err != nil {
			for _, h := range handed {
				c.watchLocked(h) // nobody else watches those QEMUs
			}
			return nil, err
		}
		c.sess = s
	}
	c.inflight++
	c.idleGen++ // disarms the idle timer
	c.settle = false
	return c.sess, nil
}

// done ends a call on s; the last one arms the idle timer (at once after
// Settle).
func (c *Client) done(s *session) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inflight--
	if c.inflight > 0 || c.sess != s || c.closed {
		return
	}
	idle := c.opts.Idle
	if c.settle {
		idle, c.settle = 0, false
	}
	c.idleGen++
	gen := c.idleGen
	time.AfterFunc(idle, func() { c.release(gen) })
}

// Settle says no call is due soon (the caller just started a VM): the
// helper goes as soon as the calls in flight end, not Idle later. A pod's
// helper then never runs beside a guest that has had time to use its RAM
// (docs/overhead.md).
func (c *Client) Settle() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sess == nil || c.closed {
		return
	}
	if c.inflight > 0 {
		c.settle = true
		return
	}
	c.idleGen++
	gen := c.idleGen
	go c.release(gen)
}

func (c *Client) spawn(ctx context.Context) (*session, error) {
	h, err := c.opts.Spawn(ctx)
	if err != nil {
		return nil, fmt.Errorf("start the libvirt helper: %w", err)
	}
	s := &session{helper: h, rpc: rpc.NewClientWithCodec(jsonrpc.NewClientCodec(h.Conn)), pumped: make(chan struct{})}
	var rep Reply
	call := s.rpc.Go(service+"Hello", &Request{}, &rep, make(chan *rpc.Call, 1))
	select {
	case <-call.Done:
	case <-ctx.Done():
		c.end(s)
		return nil, ctx.Err()
	}
	if call.Error != nil {
		c.end(s)
		return nil, fmt.Errorf("the libvirt helper exited before answering (its log is in this process's): %v: %w", call.Error, errdefs.ErrUnavailable)
	}
	if err := rep.Err.error(); err != nil {
		c.end(s)
		return nil, err
	}
	go c.pump(s)
	return s, nil
}

// pump moves the helper's events to the Client's queue until the session
// ends.
func (c *Client) pump(s *session) {
	defer close(s.pumped)
	for {
		var rep Reply
		if err := s.rpc.Call(service+"Events", &Request{Wait: true}, &rep); err != nil {
			if !s.ending.Load() {
				go c.lost(s, err) // not here: release may hold c.mu, waiting for this pump
			}
			return
		}
		c.deliver(rep.Events...)
		if rep.Closed {
			return
		}
	}
}

// deliver notes which QEMUs run and queues the events.
func (c *Client) deliver(evs ...virt.Event) {
	c.runMu.Lock()
	for _, ev := range evs {
		switch ev.Type {
		case virt.EventStarted:
			c.running[ev.Domain] = true
		case virt.EventStopped:
			delete(c.running, ev.Domain)
		}
	}
	c.runMu.Unlock()
	for _, ev := range evs {
		c.events.push(ev)
	}
}

// lost handles a helper that went away while it was the live one: the
// next call starts another; one starts now too, so that running QEMUs are
// handed over to a watch again.
func (c *Client) lost(s *session, err error) {
	c.mu.Lock()
	if c.sess != s || c.closed {
		c.mu.Unlock()
		return
	}
	log.L.WithError(err).Warn("the libvirt helper went away; starting another")
	c.sess = nil
	c.mu.Unlock()
	go func() {
		c.end(s)
		if s2, err := c.acquire(context.Background()); err == nil {
			c.done(s2)
		}
	}()
}

// end hangs up on a helper and waits for it to exit (bounded: then it is
// killed).
func (c *Client) end(s *session) {
	s.ended.Do(func() { c.hangUp(s) })
}

func (c *Client) hangUp(s *session) {
	s.ending.Store(true)
	_ = s.rpc.Close() // closes the connection
	exited := make(chan error, 1)
	go func() { exited <- s.helper.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			log.L.WithError(err).Debug("libvirt helper exit")
		}
	case <-time.After(30 * time.Second):
		log.L.Warn("the libvirt helper did not exit 30 s after its connection closed; killing it")
		s.helper.Kill()
		<-exited
	}
}

// release lets the helper go after Idle without calls, handing each
// running QEMU over to a watch.
func (c *Client) release(gen int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.idleGen || c.inflight > 0 || c.sess == nil || c.closed {
		return
	}
	s := c.sess
	handed := c.handoff(s)
	handed = c.lastEvents(s, handed)
	c.sess = nil
	c.end(s)
	<-s.pumped
	for _, h := range handed {
		c.watchLocked(h)
	}
}

// lastEvents has the helper close libvirt and hand over the events it sent
// until then, which say what became of the handed-over domains meanwhile:
// one that stopped needs no watch; one whose guest powered off or panicked
// (libvirt then stops QEMU itself) is watched knowing why it goes.
func (c *Client) lastEvents(s *session, handed []handoff) []handoff {
	var rep Reply
	req := Request{Deadline: time.Now().Add(30 * time.Second)}
	if err := s.rpc.Call(service+"Release", &req, &rep); err != nil {
		log.L.WithError(err).Warn("closing the libvirt helper's connection")
		return handed
	}
	if err := rep.Err.error(); err != nil {
		log.L.WithError(err).Warn("closing libvirt in its helper")
	}
	c.deliver(rep.Events...)
	out := handed[:0]
	for _, h := range handed {
		stopped := false
		for _, ev := range rep.Events {
			if ev.Domain != h.name {
				continue
			}
			switch ev.Type {
			case virt.EventStopped:
				stopped = true
			case virt.EventShutdown, virt.EventCrashed:
				if h.reason == virt.StopNone {
					h.reason = ev.Reason
				}
			case virt.EventStarted:
				stopped, h.reason = false, virt.StopNone
			}
		}
		if !stopped {
			out = append(out, h)
		}
	}
	return out
}

// handoff asks the helper, before it goes, what a watch needs for each
// domain whose QEMU runs; a domain that stopped meanwhile gets its
// EventStopped if the events did not bring one.
func (c *Client) handoff(s *session) []handoff {
	ask := func(method string, req Request) (Reply, error) {
		var rep Reply
		req.Deadline = time.Now().Add(10 * time.Second)
		if err := s.rpc.Call(service+method, &req, &rep); err != nil {
			return rep, err
		}
		return rep, rep.Err.error()
	}
	if rep, err := ask("Events", Request{}); err == nil {
		c.deliver(rep.Events...)
	}
	list, err := ask("List", Request{})
	if err != nil {
		log.L.WithError(err).Warn("list domains before the libvirt helper goes")
		return nil
	}
	var out []handoff
	for _, name := range list.Names {
		info, err := ask("Info", Request{Name: name})
		if err != nil {
			continue
		}
		switch info.Info.State {
		case virt.StateShutoff:
			c.runMu.Lock()
			was := c.running[name]
			c.runMu.Unlock()
			if was {
				c.deliver(virt.Event{Domain: name, Type: virt.EventStopped, Reason: info.Info.Reason})
			}
			continue
		case virt.StateUnknown:
			continue
		}
		if info.Info.PID <= 0 {
			continue
		}
		socks, err := ask("Sockets", Request{Name: name})
		if err != nil {
			log.L.WithError(err).Warnf("domain %s: no monitor to watch it by", name)
			continue
		}
		c.runMu.Lock()
		c.running[name] = true
		c.runMu.Unlock()
		out = append(out, handoff{name: name, monitor: socks.Text, agent: socks.Agent, log: socks.Log, pid: info.Info.PID})
	}
	return out
}

func (c *Client) watchLocked(h handoff) {
	c.watches[h.name] = startWatch(h, c.deliver)
}

// unwatchLocked ends every watch, so libvirt can have the monitors, and
// returns what they watched.
func (c *Client) unwatchLocked() []handoff {
	var out []handoff
	for name, w := range c.watches {
		if w.stop() {
			out = append(out, w.h)
		}
		delete(c.watches, name)
	}
	return out
}

// Close ends the watches and the helper; running QEMUs keep running.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.idleGen++
	for c.direct > 0 {
		// A direct call uses its watch's monitor and pidfd: it ends first
		// (each is bounded).
		c.directDone.Wait()
	}
	c.unwatchLocked()
	s := c.sess
	c.sess = nil
	c.mu.Unlock()
	if s != nil {
		c.end(s)
		<-s.pumped
	}
	c.events.close()
	return nil
}

// Events implements virt.Hypervisor.
func (c *Client) Events() <-chan virt.Event { return c.events.out }

func (c *Client) call(ctx context.Context, method string, req Request) (Reply, error) {
	if err := ctx.Err(); err != nil {
		return Reply{}, err
	}
	s, err := c.acquire(ctx)
	if err != nil {
		return Reply{}, err
	}
	if d, ok := ctx.Deadline(); ok {
		req.Deadline = d
	}
	var rep Reply
	call := s.rpc.Go(service+method, &req, &rep, make(chan *rpc.Call, 1))
	select {
	case <-call.Done:
		c.done(s)
	case <-ctx.Done():
		// The call goes on in the helper, which stays until it ends.
		go func() { <-call.Done; c.done(s) }()
		return Reply{}, ctx.Err()
	}
	if call.Error != nil {
		c.lost(s, call.Error)
		return Reply{}, fmt.Errorf("%s: the libvirt helper went away: %v: %w", method, call.Error, errdefs.ErrUnavailable)
	}
	return rep, rep.Err.error()
}

func (c *Client) Capabilities(ctx context.Context, virtType string) (string, string, error) {
	rep, err := c.call(ctx, "Capabilities", Request{VirtType: virtType})
	return rep.Caps, rep.DomCaps, err
}

func (c *Client) Define(ctx context.Context, xml string) error {
	_, err := c.call(ctx, "Define", Request{XML: xml})
	return err
}

func (c *Client) Start(ctx context.Context, name string, opts virt.StartOptions) error {
	_, err := c.call(ctx, "Start", Request{Name: name, Paused: opts.Paused})
	return err
}

func (c *Client) Resume(ctx context.Context, name string) error {
	_, err := c.call(ctx, "Resume", Request{Name: name})
	return err
}

func (c *Client) Suspend(ctx context.Context, name string) error {
	_, err := c.call(ctx, "Suspend", Request{Name: name})
	return err
}

func (c *Client) SetMemoryHardLimit(ctx context.Context, name string, bytes uint64) error {
	_, err := c.call(ctx, "SetMemoryHardLimit", Request{Name: name, Bytes: bytes})
	return err
}

// Shutdown implements virt.Hypervisor. While no helper runs it presses
// the power button on QEMU's monitor itself: a pod's stop starts no
// libvirt, so none runs beside a guest that has used its RAM (the
// overhead model, docs/overhead.md, counts on that).
func (c *Client) Shutdown(ctx context.Context, name string) error {
	if w := c.directKill(name); w != nil {
		var err error
		if !w.gone() { // else QEMU is going already (a power-off under way)
			err = w.powerdown(ctx)
		}
		c.endDirect()
		if !errors.Is(err, errNoMonitor) {
			return err
		}
	}
	_, err := c.call(ctx, "Shutdown", Request{Name: name})
	return err
}

// Destroy implements virt.Hypervisor. While no helper runs it stops QEMU
// itself, as libvirt would (SIGTERM, then SIGKILL), through the pidfd
// its watch holds; libvirt cleans up after the QEMU it finds gone when
// the next helper opens it (the pod's delete).
func (c *Client) Destroy(ctx context.Context, name string) error {
	if w := c.directKill(name); w != nil {
		err := w.destroy(ctx)
		c.endDirect()
		if !errors.Is(err, errNoMonitor) {
			return err
		}
	}
	_, err := c.call(ctx, "Destroy", Request{Name: name})
	return err
}

func (c *Client) Undefine(ctx context.Context, name string) error {
	_, err := c.call(ctx, "Undefine", Request{Name: name})
	return err
}

func (c *Client) Info(ctx context.Context, name string) (virt.Info, error) {
	rep, err := c.call(ctx, "Info", Request{Name: name})
	return rep.Info, err
}

func (c *Client) Stats(ctx context.Context, name string) (virt.Stats, error) {
	rep, err := c.call(ctx, "Stats", Request{Name: name})
	return rep.Stats, err
}

// AgentCommand implements virt.Hypervisor. While no helper runs it talks
// to the guest agent's socket itself, so an exec (a guest-exec, then its
// status polled) starts no libvirt.
func (c *Client) AgentCommand(ctx context.Context, name, command string, timeout time.Duration) (string, error) {
	if path := c.directAgent(name); path != "" {
		defer c.endDirect()
		return agentCommand(ctx, path, name, command, timeout)
	}
	rep, err := c.call(ctx, "AgentCommand", Request{Name: name, Command: command, Timeout: timeout})
	return rep.Text, err
}

// directAgent is the agent socket of name's QEMU if no helper runs and a
// watch follows that QEMU, counted as a call in flight; "" otherwise.
func (c *Client) directAgent(name string) string {
	if w := c.directWatch(name); w != nil {
		if w.h.agent != "" {
			return w.h.agent
		}
		c.endDirect()
	}
	return ""
}

// directWatch is the watch that follows name's QEMU if no helper runs and
// QEMU is not going, counted as a call in flight (endDirect ends it): no
// helper starts, and the watch stays, until it ends. nil otherwise.
func (c *Client) directWatch(name string) *watch {
	return c.direct1(name, (*watch).gone)
}

// directKill is directWatch for a Destroy, which also takes a QEMU that is
// going (a guest power-off under way) but has not gone.
func (c *Client) directKill(name string) *watch {
	return c.direct1(name, (*watch).exited)
}

func (c *Client) direct1(name string, skip func(*watch) bool) *watch {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.watches[name]
	if c.sess != nil || c.closed || w == nil || skip(w) {
		return nil
	}
	c.direct++
	return w
}

func (c *Client) endDirect() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.direct--; c.direct == 0 {
		c.directDone.Broadcast()
	}
}

func (c *Client) List(ctx context.Context) ([]string, error) {
	rep, err := c.call(ctx, "List", Request{})
	return rep.Names, err
}

var _ virt.Hypervisor = (*Client)(nil)
