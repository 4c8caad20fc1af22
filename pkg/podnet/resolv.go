package podnet

import (
	"bufio"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
)

// DNS is what the guest learns about name resolution by DHCP.
type DNS struct {
	// Servers are IPv4 name servers: DHCPv4 cannot carry IPv6 ones.
	Servers []netip.Addr
	// Search is the search list, in order.
	Search []string
}

// ResolvConf reads the DNS settings the kubelet wrote for the pod, a
// resolv.conf(5) file.
//
// Only what DHCP can carry is kept: "nameserver" lines with IPv4 addresses
// and the search list ("search", or the older "domain"; the last of them
// wins, as in the resolver). "options" (Kubernetes sets ndots:5) has no DHCP
// option and is dropped: the guest resolves with its own defaults.
func ResolvConf(path string) (DNS, error) {
	f, err := os.Open(path)
	if err != nil {
		return DNS{}, err
	}
	defer f.Close()
	dns, err := parseResolvConf(f)
	if err != nil {
		return DNS{}, fmt.Errorf("%s: %w", path, err)
	}
	return dns, nil
}

func parseResolvConf(r io.Reader) (DNS, error) {
	var dns DNS
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if i := strings.IndexAny(line, "#;"); i >= 0 {
			line = line[:i]
		}
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		switch fields[0] {
		case "nameserver":
			ip, err := netip.ParseAddr(fields[1])
			if err == nil && ip.Is4() {
				dns.Servers = append(dns.Servers, ip)
			}
		case "search":
			dns.Search = append([]string(nil), fields[1:]...)
		case "domain":
			dns.Search = []string{fields[1]}
		}
	}
	return dns, sc.Err()
}
