package podnet_test

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/vmpod/vmpod/pkg/podnet"
)

var equateNetip = cmpopts.EquateComparable(netip.Addr{}, netip.Prefix{})

func TestInspect(t *testing.T) {
	mac := podMAC.String()
	tests := []struct {
		name    string
		sysctl  []string   // set before eth0 goes up
		setup   [][]string // ip -n <ns> ... commands, after eth0 (a veth) exists and is up
		ifname  string
		want    podnet.Pod
		wantErr string // substring; the interface's name must be in it too
	}{{
		name: "bridge plugin",
		setup: [][]string{
			{"addr", "add", "10.244.0.5/24", "dev", "eth0"},
			{"route", "add", "default", "via", "10.244.0.1"},
			{"route", "add", "10.96.0.0/12", "via", "10.244.0.1"},
		},
		ifname: "eth0",
		want: podnet.Pod{
			Interface: "eth0", MAC: podMAC, MTU: podMTU,
			Addr:    netip.MustParsePrefix("10.244.0.5/24"),
			Gateway: netip.MustParseAddr("10.244.0.1"),
			Routes:  []podnet.Route{{Dst: netip.MustParsePrefix("10.96.0.0/12"), Via: netip.MustParseAddr("10.244.0.1")}},
			// The kernel's link-local address, from the MAC.
			IPv6: []netip.Addr{netip.MustParseAddr("fe80::42:aff:fef4:5")},
		},
	}, {
		name: "dual stack",
		setup: [][]string{
			{"addr", "add", "10.244.0.5/24", "dev", "eth0"},
			{"addr", "add", "fd00:10:244::5/64", "dev", "eth0", "nodad"},
			{"route", "add", "default", "via", "10.244.0.1"},
		},
		ifname: "eth0",
		want: podnet.Pod{
			Interface: "eth0", MAC: podMAC, MTU: podMTU,
			Addr:    netip.MustParsePrefix("10.244.0.5/24"),
			Gateway: netip.MustParseAddr("10.244.0.1"),
			IPv6:    []netip.Addr{netip.MustParseAddr("fd00:10:244::5"), netip.MustParseAddr("fe80::42:aff:fef4:5")},
		},
	}, {
		name:   "calico style /32 with an on-link gateway, IPv6 off",
		sysctl: []string{"net.ipv6.conf.eth0.disable_ipv6=1"},
		setup: [][]string{
			{"addr", "add", "10.1.2.3/32", "dev", "eth0"},
			{"route", "add", "169.254.1.1", "dev", "eth0", "scope", "link"},
			{"route", "add", "default", "via", "169.254.1.1", "dev", "eth0"},
		},
		ifname: "eth0",
		want: podnet.Pod{
			Interface: "eth0", MAC: podMAC, MTU: podMTU,
			Addr:    netip.MustParsePrefix("10.1.2.3/32"),
			Gateway: netip.MustParseAddr("169.254.1.1"),
			Routes:  []podnet.Route{{Dst: netip.MustParsePrefix("169.254.1.1/32")}},
		},
	}, {
		// CNI's ptp plugin (kind's kindnetd): the connected route replaced
		// by one via the gateway, which gets a route of its own.
		name: "ptp plugin",
		setup: [][]string{
			{"addr", "add", "10.244.1.5/24", "dev", "eth0"},
			{"route", "add", "default", "via", "10.244.1.1", "dev", "eth0"},
			{"route", "del", "10.244.1.0/24", "dev", "eth0"},
			{"route", "add", "10.244.1.1/32", "dev", "eth0", "scope", "link", "src", "10.244.1.5"},
			{"route", "add", "10.244.1.0/24", "via", "10.244.1.1", "dev", "eth0", "src", "10.244.1.5"},
		},
		ifname: "eth0",
		want: podnet.Pod{
			Interface: "eth0", MAC: podMAC, MTU: podMTU,
			Addr:    netip.MustParsePrefix("10.244.1.5/24"),
			Gateway: netip.MustParseAddr("10.244.1.1"),
			Routes: []podnet.Route{
				{Dst: netip.MustParsePrefix("10.244.1.0/24"), Via: netip.MustParseAddr("10.244.1.1")},
				{Dst: netip.MustParsePrefix("10.244.1.1/32")},
			},
			PrefixOffLink: true,
			IPv6:          []netip.Addr{netip.MustParseAddr("fe80::42:aff:fef4:5")},
		},
	}, {
		name: "connected route deleted, nothing instead",
		setup: [][]string{
			{"addr", "add", "10.244.1.5/24", "dev", "eth0"},
			{"route", "del", "10.244.1.0/24", "dev", "eth0"},
			{"route", "add", "default", "via", "10.244.1.1", "dev", "eth0", "onlink"},
		},
		ifname: "eth0",
		want: podnet.Pod{
			Interface: "eth0", MAC: podMAC, MTU: podMTU,
			Addr:          netip.MustParsePrefix("10.244.1.5/24"),
			Gateway:       netip.MustParseAddr("10.244.1.1"),
			PrefixOffLink: true,
			IPv6:          []netip.Addr{netip.MustParseAddr("fe80::42:aff:fef4:5")},
		},
	}, {
		// Of two routes for the prefix the lower metric is the one used.
		name: "a route via the gateway before the connected one",
		setup: [][]string{
			{"addr", "add", "10.244.1.5/24", "dev", "eth0", "metric", "100"},
			{"route", "add", "10.244.1.0/24", "via", "10.244.1.1", "dev", "eth0", "metric", "50"},
			{"route", "add", "default", "via", "10.244.1.1", "dev", "eth0"},
		},
		ifname: "eth0",
		want: podnet.Pod{
			Interface: "eth0", MAC: podMAC, MTU: podMTU,
			Addr:          netip.MustParsePrefix("10.244.1.5/24"),
			Gateway:       netip.MustParseAddr("10.244.1.1"),
			Routes:        []podnet.Route{{Dst: netip.MustParsePrefix("10.244.1.0/24"), Via: netip.MustParseAddr("10.244.1.1")}},
			PrefixOffLink: true,
			IPv6:          []netip.Addr{netip.MustParseAddr("fe80::42:aff:fef4:5")},
		},
	}, {
		name: "a route via the gateway behind the connected one",
		setup: [][]string{
			{"addr", "add", "10.244.1.5/24", "dev", "eth0"},
			{"route", "add", "10.244.1.0/24", "via", "10.244.1.1", "dev", "eth0", "metric", "50"},
			{"route", "add", "default", "via", "10.244.1.1", "dev", "eth0"},
		},
		ifname: "eth0",
		want: podnet.Pod{
			Interface: "eth0", MAC: podMAC, MTU: podMTU,
			Addr:    netip.MustParsePrefix("10.244.1.5/24"),
			Gateway: netip.MustParseAddr("10.244.1.1"),
			Routes:  []podnet.Route{{Dst: netip.MustParsePrefix("10.244.1.0/24"), Via: netip.MustParseAddr("10.244.1.1")}},
			IPv6:    []netip.Addr{netip.MustParseAddr("fe80::42:aff:fef4:5")},
		},
	}, {
		name:    "no IPv4 address",
		ifname:  "eth0",
		wantErr: "no IPv4 address",
	}, {
		name:    "loopback is no pod interface",
		ifname:  "lo",
		wantErr: "not an Ethernet interface",
	}, {
		name:    "no default route",
		setup:   [][]string{{"addr", "add", "10.244.0.5/24", "dev", "eth0"}},
		ifname:  "eth0",
		wantErr: "no IPv4 default route",
	}, {
		name:    "no such interface",
		ifname:  "nope0",
		wantErr: "Link not found",
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ns := newNetns(t, "inspect")
			ip := func(args ...string) { run(t, append([]string{"ip", "-n", ns}, args...)...) }
			ip("link", "add", "eth0", "address", mac, "mtu", "1450", "type", "veth", "peer", "name", "peer0")
			ip("link", "set", "lo", "up")
			ip("link", "set", "peer0", "up")
			for _, kv := range tc.sysctl {
				run(t, "ip", "netns", "exec", ns, "sysctl", "-q", "-w", kv)
			}
			ip("link", "set", "eth0", "up")
			for _, args := range tc.setup {
				ip(args...)
			}

			var got podnet.Pod
			err := inNetns(ns, func() (err error) {
				got, err = podnet.Inspect(tc.ifname)
				return err
			})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), `"`+tc.ifname+`"`) {
					t.Fatalf("Inspect(%q) = %v, want an error naming %q and containing %q", tc.ifname, err, tc.ifname, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, equateNetip); diff != "" {
				t.Errorf("Inspect(%q) (-want +got):\n%s", tc.ifname, diff)
			}
		})
	}
}

func TestResolvConf(t *testing.T) {
	tests := []struct {
		name, text string
		want       podnet.DNS
	}{{
		name: "kubelet ClusterFirst",
		text: "search default.svc.cluster.local svc.cluster.local cluster.local\nnameserver 10.96.0.10\noptions ndots:5\n",
		want: podnet.DNS{
			Servers: []netip.Addr{netip.MustParseAddr("10.96.0.10")},
			Search:  []string{"default.svc.cluster.local", "svc.cluster.local", "cluster.local"},
			Options: []string{"ndots:5"},
		},
	}, {
		name: "options: every line, in order; not a plain word: dropped",
		text: "options ndots:2 edns0\noptions timeout:1 bad\\x ok_too attempts:3\n",
		want: podnet.DNS{Options: []string{"ndots:2", "edns0", "timeout:1", "ok_too", "attempts:3"}},
	}, {
		name: "comments, IPv6 servers dropped, last search wins",
		text: "# generated\n; old style comment\nnameserver 10.0.0.2 # primary\nnameserver fd00::10\nnameserver 10.0.0.3\n" +
			"search a.example\ndomain b.example\nsearch c.example d.example\n",
		want: podnet.DNS{
			Servers: []netip.Addr{netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.0.3")},
			Search:  []string{"c.example", "d.example"},
		},
	}, {
		name: "domain alone",
		text: "domain example.org\nnameserver 192.0.2.53\n",
		want: podnet.DNS{Servers: []netip.Addr{netip.MustParseAddr("192.0.2.53")}, Search: []string{"example.org"}},
	}, {
		name: "empty",
		text: "",
		want: podnet.DNS{},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "resolv.conf")
			if err := os.WriteFile(path, []byte(tc.text), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := podnet.ResolvConf(path)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, equateNetip); diff != "" {
				t.Errorf("ResolvConf (-want +got):\n%s", diff)
			}
		})
	}
	if _, err := podnet.ResolvConf(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("ResolvConf of a missing file: want an error")
	}
}
