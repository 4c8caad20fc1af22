package vmspec_test

import (
	"strings"
	"testing"

	"github.com/vmpod/vmpod/pkg/vmspec"
	. "github.com/vmpod/vmpod/pkg/vmspec/vmspectest"
)

// TestShareTag: a share's tag is the mount path's base name and a hash of
// the path, stable (the guest's fstab and cloud-init's mounts name it
// across restarts), within QEMU's 36 bytes, and starts with "vmpod:".
func TestShareTag(t *testing.T) {
	for path, want := range map[string]string{
		"/etc/config": "vmpod:config_d20e9af1",
		"/var/run/secrets/kubernetes.io/serviceaccount":  "vmpod:serviceaccount_8e5e6b82",
		"/data/a very long name with spaces and ünïcode": "vmpod:averylongnamewithspa_0fb0756b",
		"/..hidden":  "vmpod:hidden_aa3a51b0",
		"/mnt/___":   "vmpod:share_b58ae595",
		"/etc/conf-": "vmpod:conf-_7926ee67",
	} {
		got := vmspec.ShareTag(path)
		if got != want {
			t.Errorf("ShareTag(%q) = %q, want %q", path, got, want)
		}
		if len(got) > vmspec.MaxShareTagLen {
			t.Errorf("ShareTag(%q) = %q: %d bytes, above QEMU's %d", path, got, len(got), vmspec.MaxShareTagLen)
		}
	}
	if a, b := vmspec.ShareTag("/a/data"), vmspec.ShareTag("/b/data"); a == b {
		t.Errorf("two paths, one tag %q", a)
	}
}

// TestValidateShares: every share the Spec holds is checked, with the
// field and the accepted form named.
func TestValidateShares(t *testing.T) {
	base, err := vmspec.FromPod(MakePod("web").Obj())
	if err != nil {
		t.Fatal(err)
	}
	many := make([]vmspec.Share, vmspec.MaxShares+1)
	for i := range many {
		many[i] = vmspec.NewShare("/v/"+strings.Repeat("x", i+1), false)
	}
	for _, tc := range []struct {
		name   string
		shares []vmspec.Share
		want   string // in the error; "" accepted
	}{
		{"none", nil, ""},
		{"two, one read-only", []vmspec.Share{vmspec.NewShare("/etc/config", true), vmspec.NewShare("/data", false)}, ""},
		{"the most", many[:vmspec.MaxShares], ""},
		{"one too many", many, "spec.containers[0].volumeMounts: \"17 volumes\": a VM pod shares at most 16"},
		{"relative", []vmspec.Share{{Tag: vmspec.ShareTag("data"), MountPath: "data"}}, "volumeMounts[0].mountPath: \"data\": want a clean absolute path"},
		{"unclean", []vmspec.Share{vmspec.NewShare("/a/../etc", false)}, "want a clean absolute path"},
		{"root", []vmspec.Share{vmspec.NewShare("/", false)}, "cannot be the guest's root"},
		{"under /proc", []vmspec.Share{vmspec.NewShare("/proc/sys", false)}, "under the guest kernel's own /proc, /sys, /dev"},
		{"/dev", []vmspec.Share{vmspec.NewShare("/dev", false)}, "under the guest kernel's own"},
		{"/device is no /dev", []vmspec.Share{vmspec.NewShare("/device", false)}, ""},
		{"twice", []vmspec.Share{vmspec.NewShare("/data", false), vmspec.NewShare("/data", true)}, "volumeMounts[1].mountPath: \"/data\": mounted twice"},
		{"a tag not the path's", []vmspec.Share{{Tag: "vmpod:other_00000000", MountPath: "/data"}}, "virtio-fs tag \"vmpod:other_00000000\" is not the path's"},
		{"empty", []vmspec.Share{{}}, "volumeMounts[0].mountPath: required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := base
			s.Shares = tc.shares
			err := s.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Validate: %v; want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestSortShares: a parent's share comes before the volumes mounted below it.
func TestSortShares(t *testing.T) {
	s := []vmspec.Share{vmspec.NewShare("/data/logs", false), vmspec.NewShare("/data", false), vmspec.NewShare("/conf", true)}
	vmspec.SortShares(s)
	var got []string
	for _, sh := range s {
		got = append(got, sh.MountPath)
	}
	if strings.Join(got, " ") != "/conf /data /data/logs" {
		t.Errorf("order %v", got)
	}
}
