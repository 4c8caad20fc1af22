package podnet_test

import (
	"context"
	"log"
	"log/slog"
	"net"
	"net/netip"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// TestDHCPFlood floods the DHCP server from the guest while the server is
// stuck in its logger, and checks that the flood starts no goroutines, that
// the server logs a few records however many packets came, and that it
// still answers afterwards.
func TestDHCPFlood(t *testing.T) {
	gate := newGateLog()
	// slog.SetDefault redirects the log package too, and setting the old
	// default back does not undo that.
	prev, logOut, logFlags := slog.Default(), log.Writer(), log.Flags()
	slog.SetDefault(slog.New(gate))
	t.Cleanup(func() {
		slog.SetDefault(prev)
		log.SetOutput(logOut)
		log.SetFlags(logFlags)
	})

	tp := newTopology(t)
	a := attach(t, tp, nil) // its DHCP server logs through gate
	t.Cleanup(gate.open)    // runs before a.Close, which would wait for the stuck server
	guest := openTap(t, tp.pod, tapName, podMAC)

	dhcpFrame := func(payload []byte) []byte {
		return udpFrame(udpPacket{
			srcMAC: podMAC, dstMAC: bcastMAC,
			src:     netip.AddrPortFrom(netip.IPv4Unspecified(), dhcpv4.ClientPort),
			dst:     netip.AddrPortFrom(netip.AddrFrom4([4]byte{255, 255, 255, 255}), dhcpv4.ServerPort),
			payload: payload,
		})
	}
	message := func(mods ...dhcpv4.Modifier) []byte {
		m, err := dhcpv4.New(mods...)
		if err != nil {
			t.Fatal(err)
		}
		return dhcpFrame(m.ToBytes())
	}
	other := net.HardwareAddr{0x02, 0, 0, 0, 0, 0x99}
	flood := [][]byte{
		dhcpFrame([]byte("not DHCP")),
		message(dhcpv4.WithHwAddr(podMAC), dhcpv4.WithMessageType(dhcpv4.MessageTypeDecline)),
		message(dhcpv4.WithHwAddr(other), dhcpv4.WithMessageType(dhcpv4.MessageTypeDiscover)),
		message(dhcpv4.WithHwAddr(podMAC), dhcpv4.WithMessageType(dhcpv4.MessageTypeDiscover)),
	}

	// The first record the server logs holds it in the logger.
	for try := 1; ; try++ {
		guest.send(t, flood[0])
		select {
		case <-gate.blocked:
		case <-time.After(time.Second):
			if try < 3 {
				continue
			}
			t.Fatal("the DHCP server logged nothing about a malformed message")
		}
		break
	}
	before, createdBefore := runtime.NumGoroutine(), goroutinesCreated()
	const packets = 2000
	for i := range packets {
		guest.send(t, flood[i%len(flood)])
	}
	time.Sleep(300 * time.Millisecond) // for the kernel to deliver what it will
	if during := runtime.NumGoroutine(); during > before+10 {
		t.Errorf("goroutines: %d before the flood, %d during it: the server starts one per packet", before, during)
	}

	gate.open()
	discover, err := dhcpv4.NewDiscovery(podMAC)
	if err != nil {
		t.Fatal(err)
	}
	if offer := guest.exchange(t, discover, netip.IPv4Unspecified(), 3); offer == nil {
		t.Error("no OFFER after the flood")
	}
	// Short-lived goroutines would not show in a count; the total created
	// does. The server has drained what its socket buffered by now: it
	// answered the DISCOVER after that.
	created := goroutinesCreated() - createdBefore
	t.Logf("%d goroutines created during the flood", created)
	if created > 50 {
		t.Errorf("%d goroutines created while the server handled a flood of %d packets", created, packets)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}

	// Per kind: the first record, and the count of the rest at Close.
	records := gate.records()
	t.Logf("%d records for %d packets:\n%s", len(records), packets+1, strings.Join(records, "\n"))
	perMessage := map[string]int{}
	suppressed := false
	for _, r := range records {
		msg, _, _ := strings.Cut(r, " |")
		perMessage[msg]++
		suppressed = suppressed || strings.Contains(r, "suppressed=")
	}
	for msg, n := range perMessage {
		if n > 3 {
			t.Errorf("%d records %q: want one, and one with the count of those held back", n, msg)
		}
	}
	if len(records) > 12 || !suppressed {
		t.Errorf("%d records, suppressed counts reported: %v; want a few and counts", len(records), suppressed)
	}
}

func goroutinesCreated() uint64 {
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// gateLog records every record as "LEVEL msg | k=v ..."; until open, the
// first Handle call waits there (at most 10 s), as a logger stuck on a full
// pipe would.
type gateLog struct {
	mu      sync.Mutex
	lines   []string
	opened  chan struct{}
	blocked chan struct{} // closed when a Handle call starts waiting
	once    sync.Once
	opener  sync.Once
}

func newGateLog() *gateLog {
	return &gateLog{opened: make(chan struct{}), blocked: make(chan struct{})}
}

func (g *gateLog) open() { g.opener.Do(func() { close(g.opened) }) }

func (g *gateLog) records() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.lines...)
}

func (g *gateLog) Enabled(context.Context, slog.Level) bool { return true }
func (g *gateLog) WithAttrs([]slog.Attr) slog.Handler       { return g }
func (g *gateLog) WithGroup(string) slog.Handler            { return g }

func (g *gateLog) Handle(_ context.Context, r slog.Record) error {
	line := r.Level.String() + " " + r.Message + " |"
	r.Attrs(func(a slog.Attr) bool {
		line += " " + a.String()
		return true
	})
	g.mu.Lock()
	g.lines = append(g.lines, line)
	g.mu.Unlock()
	select {
	case <-g.opened:
	default:
		g.once.Do(func() { close(g.blocked) })
		select {
		case <-g.opened:
		case <-time.After(10 * time.Second):
		}
	}
	return nil
}
