package cri

import (
	"context"
	"sort"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ContainerStatus is the container's state, exit and log path.
func (s *Server) ContainerStatus(ctx context.Context, r *runtimeapi.ContainerStatusRequest) (*runtimeapi.ContainerStatusResponse, error) {
	c, err := s.container(r.GetContainerId())
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ContainerStatusResponse{Status: containerStatus(c.Get())}, nil
}

// ListContainers lists the containers the filter lets through.
func (s *Server) ListContainers(ctx context.Context, r *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	f := r.GetFilter()
	resp := &runtimeapi.ListContainersResponse{}
	for _, c := range snapshot(&s.mu, s.containers) {
		rec := c.Get()
		state := containerStateOf(rec)
		switch {
		case f.GetId() != "" && !strings.HasPrefix(rec.ID, f.GetId()):
			continue
		case f.GetPodSandboxId() != "" && !strings.HasPrefix(rec.SandboxID, f.GetPodSandboxId()):
			continue
		case f.GetState() != nil && f.GetState().GetState() != state:
			continue
		case !matchLabels(rec.Labels, f.GetLabelSelector()):
			continue
		}
		resp.Containers = append(resp.Containers, &runtimeapi.Container{
			Id: rec.ID, PodSandboxId: rec.SandboxID, Metadata: containerMetadata(rec),
			Image: &runtimeapi.ImageSpec{Image: rec.Image}, ImageRef: rec.ImageID, ImageId: rec.ImageID,
			State: state, CreatedAt: rec.CreatedAt, Labels: rec.Labels, Annotations: rec.Annotations,
		})
	}
	sort.Slice(resp.Containers, func(i, j int) bool { return resp.Containers[i].CreatedAt < resp.Containers[j].CreatedAt })
	return resp, nil
}

func containerStatus(rec containerRecord) *runtimeapi.ContainerStatus {
	st := &runtimeapi.ContainerStatus{
		Id: rec.ID, Metadata: containerMetadata(rec), State: containerStateOf(rec),
		CreatedAt: rec.CreatedAt, StartedAt: rec.StartedAt, FinishedAt: rec.FinishedAt,
		ExitCode: rec.ExitCode, Reason: rec.Reason, Message: rec.Message,
		Image: &runtimeapi.ImageSpec{Image: rec.Image}, ImageRef: rec.ImageID, ImageId: rec.ImageID,
		Labels: rec.Labels, Annotations: rec.Annotations, LogPath: rec.LogPath,
		Resources: rec.Resources.cri(),
	}
	// The kubelet reports each image volume's digest from these
	// (ImageVolumeWithDigest).
	for _, m := range rec.Mounts {
		st.Mounts = append(st.Mounts, m.criMount())
	}
	return st
}

func containerMetadata(rec containerRecord) *runtimeapi.ContainerMetadata {
	return &runtimeapi.ContainerMetadata{Name: rec.Name, Attempt: rec.Attempt}
}

func containerStateOf(rec containerRecord) runtimeapi.ContainerState {
	switch rec.State {
	case containerCreated:
		return runtimeapi.ContainerState_CONTAINER_CREATED
	case containerRunning:
		return runtimeapi.ContainerState_CONTAINER_RUNNING
	case containerExited:
		return runtimeapi.ContainerState_CONTAINER_EXITED
	default:
		return runtimeapi.ContainerState_CONTAINER_UNKNOWN
	}
}
