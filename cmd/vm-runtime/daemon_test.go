package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	node "github.com/vmpod/vmpod/api/node/v1"
	"github.com/vmpod/vmpod/pkg/jail"
	"github.com/vmpod/vmpod/pkg/vmd"
)

// TestDaemonFlags: the daemon's defaults, each flag into its field, and a
// bad value or a stray argument a bad command line (exit 2).
func TestDaemonFlags(t *testing.T) {
	cfg, socket, metrics, code := daemonFlags(nil)
	if code != 0 || socket != node.DefaultSocket || metrics != "" {
		t.Fatalf("defaults: socket %q, metrics %q, exit %d", socket, metrics, code)
	}
	want := vmd.Config{StateRoot: "/var/lib/vmpod", CapsCache: DefaultCapsCache, KVMCache: cfg.KVMCache, DiskCap: 20 << 30, CapsProbe: capsProbe()}
	if diff := cmp.Diff(want, cfg); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}
	cfg, socket, metrics, code = daemonFlags([]string{"--socket", "/run/x.sock", "--state-root", "/s", "--qemu-uids", "2000000000:100",
		"--disk-cap", "1Gi", "--metrics-address", "127.0.0.1:9470"})
	wantUIDs := jail.Range{First: 2000000000, Count: 100}
	if code != 0 || socket != "/run/x.sock" || metrics != "127.0.0.1:9470" || cfg.StateRoot != "/s" || cfg.DiskCap != 1<<30 || cfg.UIDs != wantUIDs {
		t.Errorf("flags: %+v, socket %q, metrics %q, exit %d", cfg, socket, metrics, code)
	}
	for _, bad := range [][]string{{"--disk-cap", "lots"}, {"--disk-cap", "-1Gi"}, {"--qemu-uids", "1:x"}, {"stray"}, {"--no-such-flag"}} {
		if _, _, _, code := daemonFlags(bad); code != 2 {
			t.Errorf("%q: exit %d, want 2", bad, code)
		}
	}
}

// TestDaemonUnitFlags: the node daemon's unit parses and writes out the
// defaults, on the socket the shims look for by default.
func TestDaemonUnitFlags(t *testing.T) {
	argv := unitArgs(t, "vm-runtime-daemon.service", "daemon")
	got, gotSocket, _, code := daemonFlags(argv)
	if code != 0 {
		t.Fatalf("the unit's flags %q do not parse (exit %d)", argv, code)
	}
	want, wantSocket, _, _ := daemonFlags(nil)
	if gotSocket != wantSocket || gotSocket != node.DefaultSocket {
		t.Errorf("the unit serves %s; the default is %s, the shims' %s", gotSocket, wantSocket, node.DefaultSocket)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the unit's flags are not the defaults (-want +got):\n%s", diff)
	}
}
