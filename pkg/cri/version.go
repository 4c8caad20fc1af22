package cri

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// RuntimeName is what Version reports; RuntimeVersion is set by the
// binary (its build's version).
const RuntimeName = "vmpod"

// RuntimeVersion is the runtime's version, as Version reports it.
var RuntimeVersion = "0.0.0-dev"

// Version is the CRI version this server speaks.
func (s *Server) Version(ctx context.Context, r *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{
		Version: "0.1.0", RuntimeName: RuntimeName, RuntimeVersion: RuntimeVersion, RuntimeApiVersion: "v1",
	}, nil
}

// Status is ready for the runtime always and for the network when the
// node has a CNI config.
func (s *Server) Status(ctx context.Context, r *runtimeapi.StatusRequest) (*runtimeapi.StatusResponse, error) {
	netReady := &runtimeapi.RuntimeCondition{Type: runtimeapi.NetworkReady, Status: true}
	if err := s.net.ready(); err != nil {
		netReady.Status, netReady.Reason, netReady.Message = false, "NetworkPluginNotReady", err.Error()
	}
	return &runtimeapi.StatusResponse{Status: &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
		{Type: runtimeapi.RuntimeReady, Status: true},
		netReady,
	}}}, nil
}

// RuntimeConfig tells the kubelet the node's cgroup driver (Config.CgroupDriver);
// a kubelet from 1.38 on needs the answer, earlier ones use it over their
// own cgroupDriver setting.
func (s *Server) RuntimeConfig(ctx context.Context, r *runtimeapi.RuntimeConfigRequest) (*runtimeapi.RuntimeConfigResponse, error) {
	d := runtimeapi.CgroupDriver_CGROUPFS
	if s.cfg.CgroupDriver == SystemdDriver {
		d = runtimeapi.CgroupDriver_SYSTEMD
	}
	return &runtimeapi.RuntimeConfigResponse{Linux: &runtimeapi.LinuxRuntimeConfiguration{CgroupDriver: d}}, nil
}
