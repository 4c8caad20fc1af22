package cri

import (
	"context"
	"sort"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"github.com/vishvananda/netlink"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/vmpod/vmpod/internal/nsthread"
)

// PodSandboxStats is the pod's usage: its VM's CPU and memory (the VM is
// the pod: nothing else of the pod runs on the node) and the traffic of
// the pod interface, which is the guest's.
func (s *Server) PodSandboxStats(ctx context.Context, r *runtimeapi.PodSandboxStatsRequest) (*runtimeapi.PodSandboxStatsResponse, error) {
	sb, err := s.sandbox(r.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	st, err := s.sandboxStats(sb)
	if err != nil {
		return nil, err
	}
	return &runtimeapi.PodSandboxStatsResponse{Stats: st}, nil
}

// ListPodSandboxStats is PodSandboxStats of each sandbox the filter lets
// through.
func (s *Server) ListPodSandboxStats(ctx context.Context, r *runtimeapi.ListPodSandboxStatsRequest) (*runtimeapi.ListPodSandboxStatsResponse, error) {
	f := r.GetFilter()
	resp := &runtimeapi.ListPodSandboxStatsResponse{}
	for _, sb := range snapshot(&s.mu, s.sandboxes) {
		rec := sb.Get()
		switch {
		case f.GetId() != "" && !strings.HasPrefix(rec.ID, f.GetId()):
			continue
		case !matchLabels(rec.Labels, f.GetLabelSelector()):
			continue
		}
		st, err := s.sandboxStats(sb)
		if err != nil {
			return nil, err
		}
		resp.Stats = append(resp.Stats, st)
	}
	sort.Slice(resp.Stats, func(i, j int) bool { return resp.Stats[i].Attributes.Id < resp.Stats[j].Attributes.Id })
	return resp, nil
}

func (s *Server) sandboxStats(sb *sandbox) (*runtimeapi.PodSandboxStats, error) {
	rec := sb.Get()
	linux := &runtimeapi.LinuxPodSandboxStats{}
	for _, c := range s.containersOf(rec.ID) {
		st, err := s.containerStats(c)
		if err != nil {
			return nil, err
		}
		linux.Containers = append(linux.Containers, st)
		if st.Cpu != nil { // the one running VM
			linux.Cpu, linux.Memory = st.Cpu, st.Memory
		}
	}
	if rec.State == sandboxReady && rec.Netns != "" {
		nw, err := podNetworkUsage(rec.Netns)
		if err != nil {
			return nil, err
		}
		linux.Network = nw
	}
	return &runtimeapi.PodSandboxStats{
		Attributes: &runtimeapi.PodSandboxAttributes{Id: rec.ID, Metadata: sandboxMetadata(rec), Labels: rec.Labels, Annotations: rec.Annotations},
		Linux:      linux,
	}, nil
}

// podNetworkUsage is the pod interface's counters, read in the pod's
// namespace.
func podNetworkUsage(netnsPath string) (*runtimeapi.NetworkUsage, error) {
	var nu *runtimeapi.NetworkUsage
	err := nsthread.InNetns(netnsPath, func() error {
		l, err := netlink.LinkByName(podInterface)
		if err != nil {
			return errorf(errdefs.ErrInternal, "the pod interface %s: %v", podInterface, err)
		}
		a := l.Attrs()
		iu := &runtimeapi.NetworkInterfaceUsage{Name: podInterface}
		if st := a.Statistics; st != nil {
			iu.RxBytes = &runtimeapi.UInt64Value{Value: st.RxBytes}
			iu.RxErrors = &runtimeapi.UInt64Value{Value: st.RxErrors}
			iu.TxBytes = &runtimeapi.UInt64Value{Value: st.TxBytes}
			iu.TxErrors = &runtimeapi.UInt64Value{Value: st.TxErrors}
		}
		nu = &runtimeapi.NetworkUsage{Timestamp: time.Now().UnixNano(), DefaultInterface: iu, Interfaces: []*runtimeapi.NetworkInterfaceUsage{iu}}
		return nil
	})
	return nu, err
}
