package podnet_test

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// tapGuest stands in for a VM: it holds the tap's queue as QEMU would, so
// what it writes enters the tap's ingress and it reads what leaves the tap.
type tapGuest struct {
	f   *os.File
	mac net.HardwareAddr
}

func openTap(t testing.TB, ns, name string, mac net.HardwareAddr) *tapGuest {
	t.Helper()
	var f *os.File
	err := inNetns(ns, func() error {
		// /dev/net/tun resolves names in the namespace it was opened in.
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			return err
		}
		ifr, err := unix.NewIfreq(name)
		if err != nil {
			unix.Close(fd)
			return err
		}
		ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI)
		if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			unix.Close(fd)
			return err
		}
		// Non-blocking, so os.File polls it and read deadlines work.
		f = os.NewFile(uintptr(fd), name)
		return nil
	})
	if err != nil {
		t.Fatalf("opening tap %s: %v", name, err)
	}
	t.Cleanup(func() { f.Close() })
	return &tapGuest{f: f, mac: mac}
}

func (g *tapGuest) send(t testing.TB, frame []byte) {
	t.Helper()
	if _, err := g.f.Write(frame); err != nil {
		t.Fatalf("writing to the tap: %v", err)
	}
}

// receive returns the first UDP datagram leaving the tap that match accepts,
// or false once wait has passed. Everything else (IPv6 chatter redirected
// from the node, say) is skipped.
func (g *tapGuest) receive(t testing.TB, wait time.Duration, match func(udpPacket) bool) (udpPacket, bool) {
	t.Helper()
	if err := g.f.SetReadDeadline(time.Now().Add(wait)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 65536)
	for {
		n, err := g.f.Read(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return udpPacket{}, false
		}
		if err != nil {
			t.Fatalf("reading the tap: %v", err)
		}
		if p, ok := parseUDPFrame(buf[:n]); ok && match(p) {
			return p, true
		}
	}
}

type udpPacket struct {
	srcMAC, dstMAC net.HardwareAddr
	src, dst       netip.AddrPort
	payload        []byte
}

// udpFrame builds an Ethernet frame with an IPv4 UDP datagram in it. The
// UDP checksum is left 0, which IPv4 allows.
func udpFrame(p udpPacket) []byte {
	b := make([]byte, 14+20+8+len(p.payload))
	copy(b[0:6], p.dstMAC)
	copy(b[6:12], p.srcMAC)
	binary.BigEndian.PutUint16(b[12:], unix.ETH_P_IP)
	ip := b[14:34]
	ip[0] = 0x45 // version 4, 20-byte header
	binary.BigEndian.PutUint16(ip[2:], uint16(20+8+len(p.payload)))
	ip[8] = 64 // TTL
	ip[9] = unix.IPPROTO_UDP
	src, dst := p.src.Addr().As4(), p.dst.Addr().As4()
	copy(ip[12:16], src[:])
	copy(ip[16:20], dst[:])
	binary.BigEndian.PutUint16(ip[10:], ipChecksum(ip))
	udp := b[34:42]
	binary.BigEndian.PutUint16(udp[0:], p.src.Port())
	binary.BigEndian.PutUint16(udp[2:], p.dst.Port())
	binary.BigEndian.PutUint16(udp[4:], uint16(8+len(p.payload)))
	copy(b[42:], p.payload)
	return b
}

func ipChecksum(h []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(h); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}

func parseUDPFrame(b []byte) (udpPacket, bool) {
	if len(b) < 14+20+8 || binary.BigEndian.Uint16(b[12:]) != unix.ETH_P_IP {
		return udpPacket{}, false
	}
	ip := b[14:]
	ihl := int(ip[0]&0x0f) * 4
	total := int(binary.BigEndian.Uint16(ip[2:]))
	if ip[0]>>4 != 4 || ip[9] != unix.IPPROTO_UDP || total > len(ip) || ihl+8 > total {
		return udpPacket{}, false
	}
	udp := ip[ihl:total]
	return udpPacket{
		dstMAC:  net.HardwareAddr(b[0:6]),
		srcMAC:  net.HardwareAddr(b[6:12]),
		src:     netip.AddrPortFrom(netip.AddrFrom4([4]byte(ip[12:16])), binary.BigEndian.Uint16(udp[0:])),
		dst:     netip.AddrPortFrom(netip.AddrFrom4([4]byte(ip[16:20])), binary.BigEndian.Uint16(udp[2:])),
		payload: append([]byte(nil), udp[8:]...),
	}, true
}
