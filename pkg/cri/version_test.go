package cri

import (
	"context"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestRuntimeConfig: the kubelet learns the node's cgroup driver from
// RuntimeConfig (from 1.38 on it needs the answer).
func TestRuntimeConfig(t *testing.T) {
	for driver, want := range map[string]runtimeapi.CgroupDriver{
		CgroupfsDriver: runtimeapi.CgroupDriver_CGROUPFS,
		SystemdDriver:  runtimeapi.CgroupDriver_SYSTEMD,
	} {
		s := &Server{cfg: Config{CgroupDriver: driver}}
		resp, err := s.RuntimeConfig(context.Background(), &runtimeapi.RuntimeConfigRequest{})
		if err != nil || resp.GetLinux().GetCgroupDriver() != want {
			t.Errorf("%s: RuntimeConfig = %v, %v; want %v", driver, resp, err, want)
		}
	}
	if d := (Config{}).WithDefaults().CgroupDriver; d != detectCgroupDriver() {
		t.Errorf("default cgroup driver %q, want the detected %q", d, detectCgroupDriver())
	}
}

func TestParseCgroupDriver(t *testing.T) {
	for _, ok := range []string{"cgroupfs", "systemd"} {
		if got, err := ParseCgroupDriver(ok); err != nil || got != ok {
			t.Errorf("ParseCgroupDriver(%q) = %q, %v", ok, got, err)
		}
	}
	for _, bad := range []string{"", "Systemd", "cgroupfs,systemd"} {
		_, err := ParseCgroupDriver(bad)
		if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "want cgroupfs or systemd") {
			t.Errorf("ParseCgroupDriver(%q) = %v, want InvalidArgument naming cgroupfs and systemd", bad, err)
		}
	}
}
