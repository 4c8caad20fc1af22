package libvirt

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	lv "libvirt.org/go/libvirt"

	"github.com/vmpod/vmpod/pkg/virt"
)

var _ virt.Hypervisor = (*Conn)(nil)

// Conn is a virt.Hypervisor on one libvirt connection. It is safe for
// concurrent use; libvirt serialises what needs it per domain.
type Conn struct {
	conn *lv.Connect
	// root is the embed root; "" for the test driver, which has no QEMU
	// processes, pidfiles or cgroups to look after.
	root string

	// The test driver rejects flags QEMU needs (ACPI power button, NVRAM),
	// so each opener picks what its driver understands.
	shutdownFlags lv.DomainShutdownFlags
	undefineFlags lv.DomainUndefineFlagsValues
	// pauseAfterStart stands in for START_PAUSED, which the test driver
	// lacks; with no guest to run, start-then-suspend is the same thing.
	pauseAfterStart bool

	// defineMu makes Define's "exists?" check and the define one step:
	// libvirt itself would replace an existing domain of the same name and
	// UUID without complaint.
	defineMu sync.Mutex

	events    *eventQueue
	callback  int
	closeOnce sync.Once
	closeErr  error
}

// OpenTest connects to libvirt's built-in test:///default driver, for unit
// tests. It needs no daemon and starts no processes.
//
// Beware: in libvirt 9 the test:///default state is shared by all
// connections of a process, not fresh per connection. It starts with one
// running domain named "test". Tests should use their own domain names.
func OpenTest(ctx context.Context) (*Conn, error) {
	c, err := open(ctx, "test:///default", "")
	if err != nil {
		return nil, err
	}
	c.shutdownFlags = lv.DOMAIN_SHUTDOWN_DEFAULT
	c.undefineFlags = lv.DOMAIN_UNDEFINE_MANAGED_SAVE | lv.DOMAIN_UNDEFINE_SNAPSHOTS_METADATA
	c.pauseAfterStart = true
	return c, nil
}

func open(ctx context.Context, uri, root string) (*Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := startEventLoop(); err != nil {
		return nil, err
	}
	lc, err := lv.NewConnect(uri)
	if err != nil {
		return nil, connectError(err, uri)
	}
	c := &Conn{conn: lc, root: root, events: newEventQueue()}
	id, err := lc.DomainEventLifecycleRegister(nil, c.onLifecycle)
	if err != nil {
		c.events.close()
		_, _ = lc.Close()
		return nil, classify(err, "register lifecycle events on "+uri)
	}
	c.callback = id
	return c, nil
}

// connectError classifies a failed connect. As root the embedded driver
// resolves the QEMU user and group libvirt was built with (libvirt-qemu on
// Debian) before it reads qemu.conf, so `user = "root"` there does not help
// when that user is missing, and libvirt calls it an invalid argument. It
// is a host prerequisite, not the caller's mistake.
func connectError(err error, uri string) error {
	var le lv.Error
	if errors.As(err, &le) && le.Code == lv.ERR_INVALID_ARG && os.Geteuid() == 0 {
		return fmt.Errorf("open %s: %w: %s (the QEMU user and group libvirt was built with, libvirt-qemu on Debian, must exist on the host even though qemu.conf runs QEMU as root: hack/install-deps.sh creates them)",
			uri, errdefs.ErrFailedPrecondition, le.Message)
	}
	return classify(err, "open "+uri)
}

var eventLoop struct {
	once sync.Once
	err  error
}

// startEventLoop installs libvirt's default event loop and runs it, once
// per process. It must happen before the first connection: the embedded
// driver refuses to open without an event loop, and the test driver
// dispatches domain events through it.
func startEventLoop() error {
	eventLoop.once.Do(func() {
		if err := lv.EventRegisterDefaultImpl(); err != nil {
			eventLoop.err = classify(err, "register libvirt event loop")
			return
		}
		go func() {
			for {
				// Each call runs one iteration. An error is a failed poll;
				// back off rather than spin on it.
				if err := lv.EventRunDefaultImpl(); err != nil {
					time.Sleep(100 * time.Millisecond)
				}
			}
		}()
	})
	return eventLoop.err
}

// Events implements virt.Hypervisor.
func (c *Conn) Events() <-chan virt.Event { return c.events.out }

// Close implements virt.Hypervisor: QEMU processes keep running.
func (c *Conn) Close() error {
	c.closeOnce.Do(func() {
		var errs []error
		if err := c.conn.DomainEventDeregister(c.callback); err != nil {
			errs = append(errs, classify(err, "deregister lifecycle events"))
		}
		c.events.close()
		if c.root != "" {
			c.sweepCgroups()
		}
		if _, err := c.conn.Close(); err != nil {
			errs = append(errs, classify(err, "close connection"))
		}
		c.closeErr = errors.Join(errs...)
	})
	return c.closeErr
}

// domain looks a domain up by name. The caller must Free it.
func (c *Conn) domain(ctx context.Context, name string) (*lv.Domain, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	d, err := c.conn.LookupDomainByName(name)
	if err != nil {
		return nil, classify(err, subject(name))
	}
	return d, nil
}

func subject(name string) string { return fmt.Sprintf("domain %q", name) }
