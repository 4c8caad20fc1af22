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
	// Options are the resolver options (ndots:5, timeout:2...), sent in
	// the site-specific option OptionResolvOptions.
	Options []string
}

// ResolvConf reads the DNS settings the kubelet wrote for the pod, a
// resolv.conf(5) file.
//
// Kept: "nameserver" lines with IPv4 addresses, the search list ("search",
// or the older "domain"; the last of them wins, as in the resolver) and
// the "options" (all lines, in order, as the resolver reads them). An
// option that is not a plain word (letters, digits, ':', '.', '-', '_') is
// dropped: the guest writes them into its resolv.conf.
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
		case "options":
			for _, o := range fields[1:] {
				if plainOption(o) {
					dns.Options = append(dns.Options, o)
				}
			}
		}
	}
	return dns, sc.Err()
}

// plainOption says whether a resolver option is a plain word that a guest
// can write into resolv.conf as it is.
func plainOption(o string) bool {
	if o == "" || len(o) > 64 {
		return false
	}
	for _, c := range o {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune(":.-_", c)) {
			return false
		}
	}
	return true
}
