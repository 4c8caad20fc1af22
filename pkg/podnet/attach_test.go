package podnet_test

import (
	"encoding/json"
	"os/exec"
	"slices"
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

	// tc's own rendering of what the kernel holds, line by line.
	wantFilters := map[string][]string{
		podIf: {
			"protocol all pref 2 u32",
			"terminal flowid",
			"match 00000000/00000000 at 0",
			"mirred (Egress Redirect to device " + tapName + ") stolen",
		},
		tapName: {
			"protocol ip pref 1 u32",
			"match 05000000/0f000000 at 0",
			"match 00000000/00003fff at 4",
			"match 00110000/00ff0000 at 8",
			"match 00000043/0000ffff at 20",
			"protocol all pref 2 u32",
			"mirred (Egress Redirect to device " + podIf + ") stolen",
		},
	}
	for dev, want := range wantFilters {
		out := run(t, "tc", "-n", tp.pod, "filter", "show", "dev", dev, "ingress")
		t.Logf("tc filter show dev %s ingress:\n%s", dev, out)
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("filters on %s lack %q", dev, w)
			}
		}
		if n := strings.Count(out, "mirred"); n != 1 {
			t.Errorf("filters on %s have %d mirred actions, want 1", dev, n)
		}
	}
	// The DHCP filter must end classification by itself (no gact "pass").
	tapFilters := run(t, "tc", "-n", tp.pod, "filter", "show", "dev", tapName, "ingress")
	if dhcp, _, _ := strings.Cut(tapFilters, "pref 2"); !strings.Contains(dhcp, "terminal") || strings.Contains(dhcp, "action") {
		t.Errorf("DHCP filter is not a terminal match without actions:\n%s", dhcp)
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
