package remote

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/log"
	"golang.org/x/sys/unix"

	"github.com/vmpod/vmpod/pkg/virt"
)

// maxQMPLine bounds one message from QEMU's monitor (QEMU is untrusted).
const maxQMPLine = 1 << 20

// handoff is what a watch needs to know about a running QEMU, learnt from
// libvirt before its helper went.
type handoff struct {
	name    string // the domain
	monitor string // QMP socket
	agent   string // guest agent channel ("" if none)
	log     string // the domain's log ("" if none)
	pid     int
	// reason is why QEMU is going, if libvirt said so before it went
	// (StopNone: it did not).
	reason virt.StopReason
}

// watch follows one domain's QEMU through its QMP monitor while no libvirt
// does, and reports what libvirt would have: see the package doc.
type watch struct {
	h       handoff
	deliver func(...virt.Event)
	pidfd   int // -1 when the pid could not be opened (QEMU gone)
	done    chan struct{}
	ready   chan struct{} // closed once the monitor takes commands (after query-status)
	// unmonitored is closed once the watch has no monitor any more (it
	// could not connect, or the monitor closed): no command can go.
	unmonitored chan struct{}

	wmu sync.Mutex // one command written at a time

	stopping atomic.Bool
	mu       sync.Mutex
	conn     net.Conn
	reason   virt.StopReason // why QEMU is going, once the monitor said; StopNone before
	reported bool            // EventStopped delivered
}

func startWatch(h handoff, deliver func(...virt.Event)) *watch {
	w := &watch{h: h, deliver: deliver, pidfd: -1, done: make(chan struct{}), ready: make(chan struct{}),
		unmonitored: make(chan struct{}), reason: h.reason}
	fd, err := unix.PidfdOpen(h.pid, 0)
	if err != nil {
		// Gone since libvirt reported it, with no one to say why.
		close(w.unmonitored)
		close(w.done)
		w.report()
		return w
	}
	w.pidfd = fd
	go w.run()
	return w
}

func (w *watch) logger() *log.Entry {
	return log.L.WithField("domain", w.h.name).WithField("qemu", w.h.pid)
}

func (w *watch) run() {
	defer close(w.done)
	let, err := w.monitor()
	close(w.unmonitored)
	if let {
		return
	}
	var perr *protocolError
	switch {
	case errors.As(err, &perr):
		w.logger().WithError(err).Warn("QEMU's monitor broke the protocol; killing QEMU")
		w.kill()
	case err != nil && w.alive():
		// No monitor but a live QEMU: wait for it to go all the same.
		w.logger().WithError(err).Warn("cannot follow QEMU's monitor; waiting for QEMU to exit")
		w.waitExit(-1)
	}
	if !w.waitExit(30 * time.Second) {
		w.logger().Warn("QEMU closed its monitor but did not exit in 30 s; killing it")
		w.kill()
		w.waitExit(-1)
	}
	w.report()
}

// monitor connects to QEMU's monitor and follows it until it closes; let
// says the watch was let go (stopping) meanwhile, and err why the monitor
// ended (nil: QEMU closed it).
func (w *watch) monitor() (let bool, err error) {
	conn, err := net.DialTimeout("unix", w.h.monitor, 10*time.Second)
	if err != nil {
		return false, err
	}
	w.mu.Lock()
	w.conn = conn
	w.mu.Unlock()
	defer conn.Close()
	if w.stopping.Load() {
		return true, nil
	}
	err = w.follow(conn)
	return w.stopping.Load(), err
}

// protocolError is a monitor that does not speak QMP.
type protocolError struct{ err error }

func (e *protocolError) Error() string { return "QMP: " + e.err.Error() }
func (e *protocolError) Unwrap() error { return e.err }

type qmpMessage struct {
	QMP    json.RawMessage `json:"QMP"`
	Return json.RawMessage `json:"return"`
	Error  json.RawMessage `json:"error"`
	Event  string          `json:"event"`
	Data   struct {
		Guest bool `json:"guest"`
	} `json:"data"`
}

// follow negotiates QMP, asks for the current status and then handles
// events until QEMU closes the monitor (nil) or breaks the protocol.
func (w *watch) follow(conn net.Conn) error {
	sc := bufio.NewScanner(conn)
	sc.Buffer(make([]byte, 4096), maxQMPLine)
	next := func() (qmpMessage, error) {
		var m qmpMessage
		if !sc.Scan() {
			if err := sc.Err(); err != nil && !errors.Is(err, net.ErrClosed) {
				if errors.Is(err, bufio.ErrTooLong) {
					return m, &protocolError{err}
				}
				return m, err
			}
			return m, errEOF
		}
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			return m, &protocolError{err}
		}
		return m, nil
	}
	// reply reads up to the answer of the command just sent.
	reply := func() (qmpMessage, error) {
		for {
			m, err := next()
			if err != nil || m.Return != nil || m.Error != nil {
				return m, err
			}
			if m.Event != "" {
				w.event(conn, m)
			}
		}
	}
	greeting, err := next()
	if err != nil {
		return eofIsNil(err)
	}
	if greeting.QMP == nil {
		return &protocolError{fmt.Errorf("no greeting")}
	}
	if err := w.send(conn, `{"execute":"qmp_capabilities"}`); err != nil {
		return nil
	}
	if m, err := reply(); err != nil || m.Error != nil {
		return eofIsNil(orProtocol(err, m))
	}
	if err := w.send(conn, `{"execute":"query-status"}`); err != nil {
		return nil
	}
	m, err := reply()
	if err != nil || m.Error != nil {
		return eofIsNil(orProtocol(err, m))
	}
	var status struct {
		Status string `json:"status"`
	}
	if err := json.Unmarshal(m.Return, &status); err != nil {
		return &protocolError{err}
	}
	switch status.Status {
	case "shutdown":
		// The guest powered off while no one listened: with -no-shutdown
		// QEMU waits in this state (a host signal would have ended it).
		w.event(conn, qmpMessage{Event: "SHUTDOWN", Data: struct {
			Guest bool `json:"guest"`
		}{Guest: true}})
	case "guest-panicked":
		w.event(conn, qmpMessage{Event: "GUEST_PANICKED"})
	}
	close(w.ready)
	for {
		m, err := next()
		if err != nil {
			return eofIsNil(err)
		}
		if m.Event != "" {
			w.event(conn, m)
		}
	}
}

var errEOF = errors.New("monitor closed")

func eofIsNil(err error) error {
	if errors.Is(err, errEOF) {
		return nil
	}
	return err
}

func orProtocol(err error, m qmpMessage) error {
	if err != nil {
		return err
	}
	return &protocolError{fmt.Errorf("refused: %s", m.Error)}
}

// send writes one command; replies are read, and ignored, by follow.
func (w *watch) send(conn net.Conn, cmd string) error {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	_ = conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
	_, err := conn.Write([]byte(cmd + "\n"))
	return err
}

// errNoMonitor: the watch cannot send QEMU a command (QEMU went, or its
// monitor did); the caller asks libvirt.
var errNoMonitor = errors.New("no QEMU monitor to send to")

// powerdown presses the guest's ACPI power button on QEMU's monitor, as
// libvirt's virDomainShutdown does; the watch then follows the guest's
// power-off like any other.
func (w *watch) powerdown(ctx context.Context) error {
	select {
	case <-w.ready:
	case <-w.unmonitored:
		return errNoMonitor
	case <-ctx.Done():
		return ctx.Err()
	}
	w.mu.Lock()
	conn := w.conn
	w.mu.Unlock()
	if conn == nil || w.stopping.Load() {
		return errNoMonitor
	}
	if err := w.send(conn, `{"execute":"system_powerdown"}`); err != nil {
		return fmt.Errorf("%w: %v", errNoMonitor, err)
	}
	return nil
}

// destroy stops QEMU as libvirt's virDomainDestroy does: SIGTERM, and
// SIGKILL if QEMU has not exited 10 s later; it returns once EventStopped
// is delivered, with reason StopDestroyed unless QEMU was already going
// for another (a guest power-off in progress).
func (w *watch) destroy(ctx context.Context) error {
	if w.pidfd < 0 {
		return errNoMonitor
	}
	w.going(virt.StopDestroyed)
	if err := unix.PidfdSendSignal(w.pidfd, unix.SIGTERM, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("signal QEMU %d: %w", w.h.pid, err)
	}
	select {
	case <-w.done:
		return nil
	case <-time.After(destroyGrace):
		w.logger().Warnf("QEMU did not exit %v after SIGTERM; killing it", destroyGrace)
		w.kill()
	case <-ctx.Done():
		w.kill()
	}
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// destroyGrace is how long destroy waits for QEMU to exit on SIGTERM
// (libvirt's virProcessKillPainfully waits 10 s too).
var destroyGrace = 10 * time.Second

// event turns one QMP event into libvirt's lifecycle events. QEMU runs
// with -no-shutdown, so after a power-off or a panic it waits, paused:
// it is told to quit, as libvirt would destroy it.
func (w *watch) event(conn net.Conn, m qmpMessage) {
	ev := virt.Event{Domain: w.h.name}
	switch m.Event {
	case "SHUTDOWN":
		reason := virt.StopDestroyed // a signal, or a quit
		if m.Data.Guest {
			reason = virt.StopGuestShutdown
		}
		if !w.going(reason) {
			return
		}
		ev.Type, ev.Reason = virt.EventShutdown, reason
		w.deliver(ev)
		_ = w.send(conn, `{"execute":"quit"}`)
	case "GUEST_PANICKED":
		if !w.going(virt.StopCrashed) {
			return
		}
		ev.Type, ev.Reason = virt.EventCrashed, virt.StopCrashed
		w.deliver(ev)
		_ = w.send(conn, `{"execute":"quit"}`)
	case "STOP":
		ev.Type = virt.EventSuspended
		w.deliver(ev)
	case "RESUME":
		ev.Type = virt.EventResumed
		w.deliver(ev)
	}
}

// going records why QEMU is going; false if it was known already.
func (w *watch) going(r virt.StopReason) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.reason != virt.StopNone {
		return false
	}
	w.reason = r
	return true
}

// gone reports whether QEMU went (EventStopped delivered or due).
func (w *watch) gone() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.reported || w.reason != virt.StopNone
}

// exited reports whether QEMU's end was reported (EventStopped delivered).
func (w *watch) exited() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.reported
}

// report delivers EventStopped once: with why QEMU went if the monitor
// said, else as a failure (QEMU died).
func (w *watch) report() {
	w.mu.Lock()
	if w.reported {
		w.mu.Unlock()
		return
	}
	w.reported = true
	r := w.reason
	w.mu.Unlock()
	if r == virt.StopNone {
		// QEMU went without a word on the monitor: libvirt may have
		// stopped it as its helper went (a guest power-off it handled), and
		// said why in the domain's log.
		r = stopLogged(w.h.log)
	}
	w.deliver(virt.Event{Domain: w.h.name, Type: virt.EventStopped, Reason: r})
}

// stop lets go of the monitor, for libvirt. It reports whether QEMU still
// runs (libvirt takes it over); if it went meanwhile, it reports that.
func (w *watch) stop() bool {
	w.stopping.Store(true)
	w.mu.Lock()
	if w.conn != nil {
		w.conn.Close()
	}
	going := w.reason != virt.StopNone
	w.mu.Unlock()
	<-w.done
	if w.pidfd < 0 {
		return false
	}
	defer unix.Close(w.pidfd)
	if going {
		// Told to quit: let it, rather than hand libvirt a dying QEMU.
		w.waitExit(10 * time.Second)
	}
	if w.alive() {
		return true
	}
	w.report()
	return false
}

// alive reports whether QEMU has not exited.
func (w *watch) alive() bool { return !w.waitExit(0) }

// waitExit waits up to d (forever if negative) for QEMU to exit and
// reports whether it has.
func (w *watch) waitExit(d time.Duration) bool {
	timeout := -1
	if d >= 0 {
		timeout = int(d / time.Millisecond)
	}
	for {
		fds := []unix.PollFd{{Fd: int32(w.pidfd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, timeout)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		return err == nil && n > 0
	}
}

func (w *watch) kill() {
	if err := unix.PidfdSendSignal(w.pidfd, unix.SIGKILL, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		w.logger().WithError(err).Warn("kill QEMU")
	}
}

// stopLogged is why libvirt last stopped the domain, from the
// "shutting down, reason=..." line it writes to the domain's log when it
// stops QEMU, after the last "starting up" (so not an earlier run's);
// StopFailed if it wrote none: QEMU died with no one watching.
func stopLogged(path string) virt.StopReason {
	if path == "" {
		return virt.StopFailed
	}
	f, err := os.Open(path)
	if err != nil {
		return virt.StopFailed
	}
	defer f.Close()
	const tail = 64 << 10
	if st, err := f.Stat(); err == nil && st.Size() > tail {
		_, _ = f.Seek(st.Size()-tail, io.SeekStart)
	}
	b, _ := io.ReadAll(io.LimitReader(f, tail))
	if i := bytes.LastIndex(b, []byte(": starting up ")); i >= 0 {
		b = b[i:]
	}
	i := bytes.LastIndex(b, []byte("shutting down, reason="))
	if i < 0 {
		return virt.StopFailed
	}
	reason, _, _ := bytes.Cut(b[i+len("shutting down, reason="):], []byte("\n"))
	switch string(bytes.TrimSpace(reason)) {
	case "shutdown":
		return virt.StopGuestShutdown
	case "destroyed":
		return virt.StopDestroyed
	case "crashed":
		return virt.StopCrashed
	default:
		return virt.StopFailed
	}
}
