package podnet_test

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/vmpod/vmpod/pkg/podnet"
)

// attach inspects the pod interface and attaches tapName, in the pod netns.
// Close is registered as a cleanup, after the namespaces', so it runs first.
func attach(t testing.TB, tp topology, edit func(*podnet.Pod)) *podnet.Attachment {
	t.Helper()
	var a *podnet.Attachment
	err := inNetns(tp.pod, func() error {
		p, err := podnet.Inspect(podIf)
		if err != nil {
			return err
		}
		if edit != nil {
			edit(&p)
		}
		a, err = podnet.Attach(p, tapName)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := a.Close(); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return a
}

// podState is what Attach must give back untouched: the pod interface, its
// addresses, routes and tc hooks, and the set of links.
func podState(t testing.TB, ns string) map[string]string {
	t.Helper()
	return map[string]string{
		"addr":       run(t, "ip", "-n", ns, "-d", "addr", "show", "dev", podIf),
		"route":      run(t, "ip", "-n", ns, "route", "show", "table", "all"),
		"qdisc":      run(t, "tc", "-n", ns, "qdisc", "show", "dev", podIf),
		"filter":     run(t, "tc", "-n", ns, "filter", "show", "dev", podIf, "ingress"),
		"links":      run(t, "ip", "-n", ns, "-o", "link", "show"),
		"tap sysctl": run(t, "ip", "netns", "exec", ns, "sysctl", "-n", "net.ipv4.conf.all.rp_filter", "net.ipv4.conf.all.accept_local"),
	}
}

func tapGone(t testing.TB, ns string) {
	t.Helper()
	if out, err := exec.Command("ip", "-n", ns, "link", "show", tapName).CombinedOutput(); err == nil {
		t.Errorf("%s still exists:\n%s", tapName, out)
	}
}

func TestAttachClose(t *testing.T) {
	tp := newTopology(t)
	before := podState(t, tp.pod)

	a := attach(t, tp, nil)
	if a.Tap() != tapName || a.MAC().String() != podMAC.String() || a.MTU() != podMTU {
		t.Errorf("Attachment reports tap %q MAC %s MTU %d, want %q %s %d", a.Tap(), a.MAC(), a.MTU(), tapName, podMAC, podMTU)
	}

	var links []struct {
		Flags    []string `json:"flags"`
		MTU      int      `json:"mtu"`
		LinkInfo struct {
			Kind string `json:"info_kind"`
			Data struct {
				Type       string `json:"type"`
				PI         bool   `json:"pi"`
				MultiQueue bool   `json:"multi_queue"`
				Persist    bool   `json:"persist"`
				User       string `json:"user"`
			} `json:"info_data"`
		} `json:"linkinfo"`
	}
	if err := json.Unmarshal([]byte(run(t, "ip", "-n", tp.pod, "-j", "-d", "link", "show", tapName)), &links); err != nil || len(links) != 1 {
		t.Fatalf("ip -j link show %s: %v", tapName, err)
	}
	l := links[0]
	if info := l.LinkInfo; info.Kind != "tun" || info.Data.Type != "tap" || info.Data.PI || info.Data.MultiQueue || !info.Data.Persist || info.Data.User != "root" {
		t.Errorf("%s is %+v, want a persistent single-queue tap without PI owned by root", tapName, info)
	}
	if l.MTU != podMTU || !slices.Contains(l.Flags, "UP") {
		t.Errorf("%s: MTU %d flags %v, want MTU %d and UP", tapName, l.MTU, l.Flags, podMTU)
	}
	sysctl := run(t, "ip", "netns", "exec", tp.pod, "sysctl", "-n",
		"net.ipv4.conf."+tapName+".accept_local", "net.ipv4.conf."+tapName+".rp_filter", "net.ipv6.conf."+tapName+".disable_ipv6")
	if got := strings.Fields(sysctl); !slices.Equal(got, []string{"1", "0", "1"}) {
		t.Errorf("tap sysctls accept_local, rp_filter, disable_ipv6 = %v, want [1 0 1]", got)
	}

	// tc's own rendering of what the kernel holds. Pod IP 10.244.0.5 is
	// 0af40005; the guest's MAC is the pod's, 02:42:0a:f4:00:05.
	ethSrc := []string{"02420af4/ffffffff at -8", "00050000/ffff0000 at -4"}
	with := func(m ...string) []string { return append(append([]string(nil), ethSrc...), m...) }
	dhcp := func(src string) []string {
		return with("05000000/0f000000 at 0", "00000000/00003fff at 4", "00110000/00ff0000 at 8",
			src+"/ffffffff at 12", "00440043/ffffffff at 20")
	}
	toPod := "mirred (Egress Redirect to device " + podIf + ") stolen"
	matchAll := []string{"00000000/00000000 at 0"}
	drop := "mirred (Egress Redirect to device *) stolen"
	wantFilters := map[string]map[int]tcFilter{
		podIf: {
			2: {Protocol: "all", Matches: matchAll, Action: "mirred (Egress Redirect to device " + tapName + ") stolen"},
		},
		tapName: {
			// DHCP up to the server: no action at all (no gact "pass").
			1: {Protocol: "ip", Matches: dhcp("00000000")},
			2: {Protocol: "ip", Matches: dhcp("0af40005")},
			3: {Protocol: "ip", Matches: with("0af40005/ffffffff at 12"), Action: toPod},
			4: {Protocol: "arp", Matches: with("00010800/ffffffff at 0", "06040000/ffff0000 at 4",
				"02420af4/ffffffff at 8", "00050af4/ffffffff at 12", "00050000/ffff0000 at 16"), Action: toPod},
			5: {Protocol: "arp", Matches: with("00010800/ffffffff at 0", "06040000/ffff0000 at 4",
				"02420af4/ffffffff at 8", "00050000/ffffffff at 12", "00000000/ffff0000 at 16"), Action: toPod},
			6: {Protocol: "ipv6", Matches: with("60000000/f0000000 at 0", "00003a00/0000ff00 at 4",
				"00000000/ffffffff at 8", "00000000/ffffffff at 12", "00000000/ffffffff at 16", "00000000/ffffffff at 20",
				"87000000/ff000000 at 40"), Action: toPod},
			// A neighbor advertisement from the pod interface's
			// link-local address, fe80::42:aff:fef4:5, for itself.
			100: {Protocol: "ipv6", Matches: with("60000000/f0000000 at 0", "00003a00/0000ff00 at 4",
				"fe800000/ffffffff at 8", "00000000/ffffffff at 12", "00420aff/ffffffff at 16", "fef40005/ffffffff at 20",
				"88000000/ff000000 at 40",
				"fe800000/ffffffff at 48", "00000000/ffffffff at 52", "00420aff/ffffffff at 56", "fef40005/ffffffff at 60"), Action: toPod},
			// Anything from that address.
			1125: {Protocol: "ipv6", Matches: with("60000000/f0000000 at 0",
				"fe800000/ffffffff at 8", "00000000/ffffffff at 12", "00420aff/ffffffff at 16", "fef40005/ffffffff at 20"), Action: toPod},
			// The drop: a redirect to a device that is gone.
			1157: {Protocol: "all", Matches: matchAll, Action: drop},
		},
	}
	// Dropped before the IPv6 allow list: an extension header of each
	// kind (hop-by-hop, routing, fragment, AH, destination options,
	// mobility, HIP, shim6, experimental), router advertisements,
	// redirects, and the neighbor advertisements not allowed above.
	for i, next := range []int{0, 43, 44, 51, 60, 135, 139, 140, 253, 254} {
		wantFilters[tapName][7+i] = tcFilter{Protocol: "ipv6", Matches: []string{"60000000/f0000000 at 0", fmt.Sprintf("0000%02x00/0000ff00 at 4", next)}, Action: drop}
	}
	icmp6 := func(typ string) []string {
		return []string{"60000000/f0000000 at 0", "00003a00/0000ff00 at 4", typ + "000000/ff000000 at 40"}
	}
	wantFilters[tapName][17] = tcFilter{Protocol: "ipv6", Matches: icmp6("86"), Action: drop}
	wantFilters[tapName][18] = tcFilter{Protocol: "ipv6", Matches: icmp6("89"), Action: drop}
	wantFilters[tapName][1124] = tcFilter{Protocol: "ipv6", Matches: icmp6("88"), Action: drop}
	for dev, want := range wantFilters {
		if diff := cmp.Diff(want, tcFilters(t, tp.pod, dev)); diff != "" {
			t.Errorf("filters on %s (-want +got):\n%s", dev, diff)
		}
	}
	if links := run(t, "ip", "-n", tp.pod, "-o", "link", "show"); strings.Contains(links, "vmpdrop") {
		t.Errorf("the drop filter's throwaway tap is still there:\n%s", links)
	}

	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	tapGone(t, tp.pod)
	if diff := cmp.Diff(before, podState(t, tp.pod)); diff != "" {
		t.Errorf("pod netns after Close differs from before Attach (-before +after):\n%s", diff)
	}
}

// A failed Attach leaves nothing of its own behind and nothing of anyone
// else's changed.
func TestAttachFailsCleanly(t *testing.T) {
	tests := []struct {
		name    string
		setup   []string // a command run in the pod netns first
		edit    func(*podnet.Pod)
		tap     string
		wantErr string
	}{{
		name:    "pod interface already has an ingress qdisc",
		setup:   []string{"tc", "qdisc", "add", "dev", podIf, "ingress"},
		tap:     tapName,
		wantErr: "already has one",
	}, {
		name:    "tap name taken",
		setup:   []string{"ip", "tuntap", "add", "dev", tapName, "mode", "tap"},
		tap:     tapName,
		wantErr: "exists already",
	}, {
		name:    "tap name too long",
		tap:     "tap-with-a-long-name",
		wantErr: "want 1 to 15 characters",
	}, {
		name:    "pod interface changed since Inspect",
		edit:    func(p *podnet.Pod) { p.MAC = nodeMAC },
		tap:     tapName,
		wantErr: "changed since inspect",
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tp := newTopology(t)
			if tc.setup != nil {
				run(t, append([]string{"ip", "netns", "exec", tp.pod}, tc.setup...)...)
			}
			before := podState(t, tp.pod)
			err := inNetns(tp.pod, func() error {
				p, err := podnet.Inspect(podIf)
				if err != nil {
					return err
				}
				if tc.edit != nil {
					tc.edit(&p)
				}
				a, err := podnet.Attach(p, tc.tap)
				if err == nil {
					a.Close()
				}
				return err
			})
			if err == nil || !strings.Contains(strings.ToLower(err.Error()), tc.wantErr) {
				t.Fatalf("Attach: %v, want an error containing %q", err, tc.wantErr)
			}
			t.Logf("Attach: %v", err)
			if diff := cmp.Diff(before, podState(t, tp.pod)); diff != "" {
				t.Errorf("pod netns after the failed Attach differs (-before +after):\n%s", diff)
			}
		})
	}
}

// tcFilter is one u32 filter as tc(8) shows it.
type tcFilter struct {
	Protocol string
	Matches  []string // "value/mask at offset", in tc's order
	Action   string   // the one action, "" for none
}

// tcFilters reads the ingress filters of dev in netns ns by priority. Every
// filter must be a terminal u32 filter with at most one action.
func tcFilters(t testing.TB, ns, dev string) map[int]tcFilter {
	t.Helper()
	out := run(t, "tc", "-n", ns, "filter", "show", "dev", dev, "ingress")
	filters := map[int]tcFilter{}
	pref := -1
	for _, line := range strings.Split(out, "\n") {
		fields := strings.Fields(line)
		switch {
		case len(fields) > 0 && fields[0] == "filter" && strings.Contains(line, "::"): // a key node
			var f tcFilter
			for i := 0; i+1 < len(fields); i++ {
				switch fields[i] {
				case "protocol":
					f.Protocol = fields[i+1]
				case "pref":
					pref, _ = strconv.Atoi(fields[i+1])
				}
			}
			if !strings.Contains(line, "terminal") {
				t.Errorf("%s filter pref %d is not terminal: %s", dev, pref, line)
			}
			filters[pref] = f
		case len(fields) == 4 && fields[0] == "match" && pref >= 0:
			f := filters[pref]
			f.Matches = append(f.Matches, strings.Join(fields[1:], " "))
			filters[pref] = f
		case strings.HasPrefix(strings.TrimSpace(line), "action order") && pref >= 0:
			f := filters[pref]
			if f.Action != "" {
				t.Errorf("%s filter pref %d has more than one action", dev, pref)
			}
			_, f.Action, _ = strings.Cut(line, ": ")
			f.Action = strings.TrimSpace(f.Action)
			filters[pref] = f
		}
	}
	if t.Failed() {
		t.Logf("tc filter show dev %s ingress:\n%s", dev, out)
	}
	return filters
}
