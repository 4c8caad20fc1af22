package cri

import (
	"context"
	"fmt"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/containernetworking/cni/libcni"
	types100 "github.com/containernetworking/cni/pkg/types/100"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// podInterface is the interface CNI makes in the pod's namespace, the one
// pkg/vm gives the guest (vm.DefaultPodInterface).
const podInterface = "eth0"

// cniNetwork is the node's pod network: the first CNI config in the
// config dir, by file name, run with the plugins of the bin dirs, as
// containerd's CRI plugin does.
type cniNetwork struct {
	confDir string
	cni     *libcni.CNIConfig
}

func newCNINetwork(c Config) *cniNetwork {
	return &cniNetwork{confDir: c.CNIConfDir, cni: libcni.NewCNIConfigWithCacheDir(c.CNIBinDirs, c.cniCacheDir(), nil)}
}

// config loads the network; none is FailedPrecondition (the node's
// network is not ready).
func (n *cniNetwork) config() (*libcni.NetworkConfigList, error) {
	files, err := libcni.ConfFiles(n.confDir, []string{".conf", ".conflist", ".json"})
	if err != nil || len(files) == 0 {
		return nil, errorf(errdefs.ErrFailedPrecondition, "no CNI config in %s (%v)", n.confDir, err)
	}
	list, err := libcni.NetworkConfFromFile(files[0])
	if err != nil {
		return nil, errorf(errdefs.ErrFailedPrecondition, "CNI config %s: %v", files[0], err)
	}
	return list, nil
}

// ready says whether the node's network can set pods up.
func (n *cniNetwork) ready() error {
	_, err := n.config()
	return err
}

// portMapping is a pod port published on the node (a hostPort), in the
// form CNI's portmap plugin takes (the "portMappings" capability), as
// containerd passes it.
type portMapping struct {
	HostPort      int32  `json:"hostPort"`
	ContainerPort int32  `json:"containerPort"`
	Protocol      string `json:"protocol"`
	HostIP        string `json:"hostIP,omitempty"`
}

// portMappings are the sandbox's port mappings that publish a host port
// (containerd passes only those: a containerPort alone publishes
// nothing).
func portMappings(pms []*runtimeapi.PortMapping) []portMapping {
	var out []portMapping
	for _, pm := range pms {
		if pm.GetHostPort() <= 0 {
			continue
		}
		out = append(out, portMapping{HostPort: pm.GetHostPort(), ContainerPort: pm.GetContainerPort(),
			Protocol: strings.ToLower(pm.GetProtocol().String()), HostIP: pm.GetHostIp()})
	}
	return out
}

// runtimeConf is the CNI runtime config of pod id: its namespace, the
// kubelet's CNI_ARGS, and its host ports for a plugin that asks for the
// portMappings capability (portmap; others get none).
func runtimeConf(id, netnsPath string, md *runtimeapi.PodSandboxMetadata, ports []portMapping) *libcni.RuntimeConf {
	rc := &libcni.RuntimeConf{
		ContainerID: id,
		NetNS:       netnsPath,
		IfName:      podInterface,
		Args: [][2]string{
			{"IgnoreUnknown", "1"},
			{"K8S_POD_NAMESPACE", md.GetNamespace()},
			{"K8S_POD_NAME", md.GetName()},
			{"K8S_POD_INFRA_CONTAINER_ID", id},
			{"K8S_POD_UID", md.GetUid()},
		},
	}
	if len(ports) > 0 {
		rc.CapabilityArgs = map[string]any{"portMappings": ports}
	}
	return rc
}

// setUp adds the pod at netnsPath to the network and returns its IPs.
func (n *cniNetwork) setUp(ctx context.Context, id, netnsPath string, md *runtimeapi.PodSandboxMetadata, ports []portMapping) ([]string, error) {
	list, err := n.config()
	if err != nil {
		return nil, err
	}
	res, err := n.cni.AddNetworkList(ctx, list, runtimeConf(id, netnsPath, md, ports))
	if err != nil {
		return nil, errorf(errdefs.ErrUnavailable, "CNI %s: add pod %s: %v", list.Name, id, err)
	}
	r, err := types100.NewResultFromResult(res)
	if err != nil {
		return nil, errorf(errdefs.ErrInternal, "CNI %s: result: %v", list.Name, err)
	}
	var ips []string
	for _, ip := range r.IPs {
		ips = append(ips, ip.Address.IP.String())
	}
	if len(ips) == 0 {
		return nil, errorf(errdefs.ErrInternal, "CNI %s gave pod %s no IP", list.Name, id)
	}
	return ips, nil
}

// tearDown removes the pod from the network; CNI DEL is idempotent, and a
// namespace already gone is fine to the plugins.
func (n *cniNetwork) tearDown(ctx context.Context, id, netnsPath string, md *runtimeapi.PodSandboxMetadata, ports []portMapping) error {
	list, err := n.config()
	if err != nil {
		return err
	}
	if err := n.cni.DelNetworkList(ctx, list, runtimeConf(id, netnsPath, md, ports)); err != nil {
		return fmt.Errorf("CNI %s: delete pod %s: %v: %w", list.Name, id, err, errdefs.ErrUnavailable)
	}
	return nil
}
