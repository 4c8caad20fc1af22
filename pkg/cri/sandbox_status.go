package cri

import (
	"context"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// PodSandboxStatus is the pod's state and IPs.
func (s *Server) PodSandboxStatus(ctx context.Context, r *runtimeapi.PodSandboxStatusRequest) (*runtimeapi.PodSandboxStatusResponse, error) {
	sb, err := s.sandbox(r.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	rec := sb.Get()
	st := &runtimeapi.PodSandboxStatus{
		Id:        rec.ID,
		Metadata:  sandboxMetadata(rec),
		State:     sandboxStateOf(rec),
		CreatedAt: rec.CreatedAt,
		Linux: &runtimeapi.LinuxPodSandboxStatus{Namespaces: &runtimeapi.Namespace{Options: &runtimeapi.NamespaceOption{
			Network: runtimeapi.NamespaceMode_POD, Pid: runtimeapi.NamespaceMode_CONTAINER, Ipc: runtimeapi.NamespaceMode_POD}}},
		Labels:         rec.Labels,
		Annotations:    rec.Annotations,
		RuntimeHandler: rec.RuntimeHandler,
	}
	if len(rec.IPs) > 0 {
		st.Network = &runtimeapi.PodSandboxNetworkStatus{Ip: rec.IPs[0]}
		for _, ip := range rec.IPs[1:] {
			st.Network.AdditionalIps = append(st.Network.AdditionalIps, &runtimeapi.PodIP{Ip: ip})
		}
	}
	resp := &runtimeapi.PodSandboxStatusResponse{Status: st}
	for _, c := range s.containersOf(rec.ID) {
		resp.ContainersStatuses = append(resp.ContainersStatuses, containerStatus(c.Get()))
	}
	return resp, nil
}

// ListPodSandbox lists the sandboxes the filter lets through.
func (s *Server) ListPodSandbox(ctx context.Context, r *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	f := r.GetFilter()
	resp := &runtimeapi.ListPodSandboxResponse{}
	for _, sb := range snapshot(&s.mu, s.sandboxes) {
		rec := sb.Get()
		state := sandboxStateOf(rec)
		switch {
		case f.GetId() != "" && !strings.HasPrefix(rec.ID, f.GetId()):
			continue
		case f.GetState() != nil && f.GetState().GetState() != state:
			continue
		case !matchLabels(rec.Labels, f.GetLabelSelector()):
			continue
		}
		resp.Items = append(resp.Items, &runtimeapi.PodSandbox{
			Id: rec.ID, Metadata: sandboxMetadata(rec), State: state, CreatedAt: rec.CreatedAt,
			Labels: rec.Labels, Annotations: rec.Annotations, RuntimeHandler: rec.RuntimeHandler,
		})
	}
	sort.Slice(resp.Items, func(i, j int) bool { return resp.Items[i].CreatedAt < resp.Items[j].CreatedAt })
	return resp, nil
}

func sandboxMetadata(rec sandboxRecord) *runtimeapi.PodSandboxMetadata {
	return &runtimeapi.PodSandboxMetadata{Name: rec.Name, Namespace: rec.Namespace, Uid: rec.UID, Attempt: rec.Attempt}
}

func sandboxStateOf(rec sandboxRecord) runtimeapi.PodSandboxState {
	if rec.State == sandboxReady {
		return runtimeapi.PodSandboxState_SANDBOX_READY
	}
	return runtimeapi.PodSandboxState_SANDBOX_NOTREADY
}

// snapshot is m's values, taken under mu, to walk without it.
func snapshot[T any](mu *sync.Mutex, m map[string]T) []T {
	mu.Lock()
	defer mu.Unlock()
	return slices.Collect(maps.Values(m))
}

// matchLabels says whether labels hold every pair of the selector.
func matchLabels(labels, selector map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}
