package libvirt

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"libvirt.org/go/libvirtxml"

	"github.com/vmpod/vmpod/pkg/virt"
)

// defineTestDomain defines on c the test driver's smallest domain
// (domainXML) as edit changes it, under the test's name, which it
// returns, and destroys and undefines it when the test ends.
func defineTestDomain(t *testing.T, c *Conn, edit func(*libvirtxml.Domain)) string {
	t.Helper()
	ctx := context.Background()
	name := domainName(t)
	var dom libvirtxml.Domain
	if err := dom.Unmarshal(domainXML(t, "test", name, "")); err != nil {
		t.Fatal(err)
	}
	edit(&dom)
	x, err := dom.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Define(ctx, x); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Destroy(ctx, name)
		_ = c.Undefine(ctx, name)
	})
	return name
}

// domainXML builds the smallest domain libvirt accepts: no disk, no NIC,
// nothing to boot. typ is "test" for the test driver, "qemu" for TCG.
// A serial console goes to serialPath when it is not empty.
func domainXML(t *testing.T, typ, name, serialPath string) string {
	t.Helper()
	dom := &libvirtxml.Domain{
		Type:   typ,
		Name:   name,
		Memory: &libvirtxml.DomainMemory{Value: 64, Unit: "MiB"},
		VCPU:   &libvirtxml.DomainVCPU{Value: 1},
		OS:     &libvirtxml.DomainOS{Type: &libvirtxml.DomainOSType{Type: "hvm", Arch: "x86_64"}},
	}
	if typ == "test" {
		// The test driver's default guest arch is i686.
		dom.OS.Type.Arch = ""
	}
	if serialPath != "" {
		dom.Devices = &libvirtxml.DomainDeviceList{Serials: []libvirtxml.DomainSerial{{
			Source: &libvirtxml.DomainChardevSource{File: &libvirtxml.DomainChardevSourceFile{Path: serialPath}},
		}}}
	}
	s, err := dom.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// domainName gives each test its own domain name: the test driver's state
// is shared by every connection in the process.
func domainName(t *testing.T) string {
	return strings.NewReplacer("/", "-", "_", "-").Replace(t.Name())
}

// eventRecorder collects the events of a Conn. One per Conn: two would
// steal each other's events from the one channel.
type eventRecorder struct {
	mu     sync.Mutex
	events []virt.Event
	more   chan struct{}
}

func recordEvents(c *Conn) *eventRecorder {
	r := &eventRecorder{more: make(chan struct{}, 1)}
	go func() {
		for e := range c.Events() {
			r.mu.Lock()
			r.events = append(r.events, e)
			r.mu.Unlock()
			select {
			case r.more <- struct{}{}:
			default:
			}
		}
	}()
	return r
}

// of returns the events of one domain seen so far.
func (r *eventRecorder) of(domain string) []virt.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []virt.Event
	for _, e := range r.events {
		if e.Domain == domain {
			out = append(out, e)
		}
	}
	return out
}

// waitFor waits until an event equal to want has been seen.
func (r *eventRecorder) waitFor(t *testing.T, want virt.Event, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		for _, e := range r.of(want.Domain) {
			if e == want {
				return
			}
		}
		select {
		case <-r.more:
		case <-deadline:
			t.Fatalf("no event %+v within %v; got %+v", want, timeout, r.of(want.Domain))
		}
	}
}

// waitForType waits for an event of domain of type typ and returns it.
func (r *eventRecorder) waitForType(t *testing.T, domain string, typ virt.EventType, timeout time.Duration) virt.Event {
	t.Helper()
	deadline := time.After(timeout)
	for {
		for _, e := range r.of(domain) {
			if e.Type == typ {
				return e
			}
		}
		select {
		case <-r.more:
		case <-deadline:
			t.Fatalf("no %v event of %s within %v; got %+v", typ, domain, timeout, r.of(domain))
		}
	}
}

// waitForCount waits until at least n events of domain have been seen.
func (r *eventRecorder) waitForCount(t *testing.T, domain string, n int, timeout time.Duration) []virt.Event {
	t.Helper()
	deadline := time.After(timeout)
	for {
		if got := r.of(domain); len(got) >= n {
			return got
		}
		select {
		case <-r.more:
		case <-deadline:
			t.Fatalf("want %d events of %s within %v; got %+v", n, domain, timeout, r.of(domain))
		}
	}
}

func openTest(t *testing.T) *Conn {
	t.Helper()
	c, err := OpenTest(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return c
}
