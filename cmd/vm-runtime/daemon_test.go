package main

import (
	"flag"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	node "github.com/vmpod/vmpod/api/node/v1"
	"github.com/vmpod/vmpod/pkg/jail"
	"github.com/vmpod/vmpod/pkg/vmd"
	"github.com/vmpod/vmpod/pkg/vmspec"
)

// TestDaemonFlags: the daemon's defaults, each flag into its field, and a
// bad value or a stray argument a bad command line (exit 2).
func TestDaemonFlags(t *testing.T) {
	cfg, socket, metrics, code := daemonFlags(nil)
	if code != 0 || socket != node.DefaultSocket || metrics != "" {
		t.Fatalf("defaults: socket %q, metrics %q, exit %d", socket, metrics, code)
	}
	want := vmd.Config{StateRoot: "/var/lib/vmpod", CapsCache: DefaultCapsCache, KVMCache: cfg.KVMCache, DiskCap: 20 << 30, CapsProbe: capsProbe(), DefaultMaxVCPUs: 4,
		Mounts: vmspec.MountRules{KubeletRoot: "/var/lib/kubelet", ImageVolumeRoots: []string{"/run/containerd/io.containerd.grpc.v1.cri/image-volumes"}}}
	if diff := cmp.Diff(want, cfg); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}
	cfg, socket, metrics, code = daemonFlags([]string{"--socket", "/run/x.sock", "--state-root", "/s", "--qemu-uids", "2000000000:100",
		"--disk-cap", "1Gi", "--metrics-address", "127.0.0.1:9470", "--kubelet-root-dir", "/data/kubelet", "--volume-host-paths", "/tmp,/srv/shared",
		"--containerd-state-dir", "/run/k8s/containerd/state", "--default-max-vcpus", "0"})
	wantUIDs := jail.Range{First: 2000000000, Count: 100}
	if code != 0 || socket != "/run/x.sock" || metrics != "127.0.0.1:9470" || cfg.StateRoot != "/s" || cfg.DiskCap != 1<<30 || cfg.UIDs != wantUIDs ||
		cfg.DefaultMaxVCPUs != 0 {
		t.Errorf("flags: %+v, socket %q, metrics %q, exit %d", cfg, socket, metrics, code)
	}
	wantRules := vmspec.MountRules{KubeletRoot: "/data/kubelet", HostPaths: []string{"/tmp", "/srv/shared"},
		ImageVolumeRoots: []string{"/run/k8s/containerd/state/io.containerd.grpc.v1.cri/image-volumes"}}
	if diff := cmp.Diff(wantRules, cfg.Mounts); diff != "" {
		t.Errorf("mount rules (-want +got):\n%s", diff)
	}
	for _, bad := range [][]string{{"--disk-cap", "lots"}, {"--disk-cap", "-1Gi"}, {"--qemu-uids", "1:x"}, {"stray"}, {"--no-such-flag"},
		{"--default-max-vcpus", "-1"}, {"--default-max-vcpus", "256"}, {"--default-max-vcpus", "two"},
		{"--kubelet-root-dir", ""}, {"--volume-host-paths", "/tmp,"},
		{"--containerd-state-dir", ""}, {"--containerd-state-dir", "run/containerd"}, {"--containerd-state-dir", "/run/containerd/"}} {
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

// TestMountRuleFlags: --kubelet-root-dir and --volume-host-paths become
// the node's share rules; a bad value is an error naming its flag and
// the value.
func TestMountRuleFlags(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string // the error; "" valid
	}{
		{nil, ""},
		{[]string{"--volume-host-paths", "/tmp"}, ""},
		{[]string{"--kubelet-root-dir", "var/lib/kubelet"}, `--kubelet-root-dir "var/lib/kubelet": want a clean absolute path`},
		{[]string{"--kubelet-root-dir", ""}, `--kubelet-root-dir "": want a clean absolute path`},
		{[]string{"--volume-host-paths", "/tmp,tmp"}, `--volume-host-paths "/tmp,tmp": host path "tmp": want a clean absolute path`},
		{[]string{"--volume-host-paths", "/tmp/"}, `--volume-host-paths "/tmp/": host path "/tmp/": want a clean absolute path`},
		{[]string{"--volume-host-paths", "/tmp,"}, `--volume-host-paths "/tmp,": host path "": want a clean absolute path`},
		{[]string{"--volume-host-paths", "/"}, `--volume-host-paths "/": host path "/": would share the node's whole file system`},
	} {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		vf := addVMFlags(fs, "")
		if err := fs.Parse(tt.args); err != nil {
			t.Fatal(err)
		}
		_, err := vf.mountRules()
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%q: %v", tt.args, err)
		case tt.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tt.want)):
			t.Errorf("%q: %v; want %q", tt.args, err, tt.want)
		}
	}
}
