package cri

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestPortMappings: the sandbox's host ports reach CNI as the
// portMappings capability (portmap's), as containerd passes them; a
// container port alone publishes nothing.
func TestPortMappings(t *testing.T) {
	pms := portMappings([]*runtimeapi.PortMapping{
		{ContainerPort: 80},
		{ContainerPort: 80, HostPort: 12000},
		{Protocol: runtimeapi.Protocol_UDP, ContainerPort: 53, HostPort: 5353, HostIp: "127.0.0.1"},
	})
	want := []portMapping{
		{HostPort: 12000, ContainerPort: 80, Protocol: "tcp"},
		{HostPort: 5353, ContainerPort: 53, Protocol: "udp", HostIP: "127.0.0.1"},
	}
	if diff := cmp.Diff(want, pms); diff != "" {
		t.Errorf("portMappings (-want +got)\n%s", diff)
	}
	md := &runtimeapi.PodSandboxMetadata{Name: "p", Namespace: "ns", Uid: "u"}
	if rc := runtimeConf("id", "/netns", md, pms); !cmp.Equal(rc.CapabilityArgs, map[string]any{"portMappings": want}) {
		t.Errorf("CapabilityArgs %v, want the port mappings", rc.CapabilityArgs)
	}
	if rc := runtimeConf("id", "/netns", md, nil); rc.CapabilityArgs != nil {
		t.Errorf("no host ports: CapabilityArgs %v, want none", rc.CapabilityArgs)
	}
}
