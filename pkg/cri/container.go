package cri

import (
	"strconv"
	"strings"

	"github.com/containerd/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/vmpod/vmpod/internal/ckpt"
	"github.com/vmpod/vmpod/pkg/vmd"
)

// containerState is a container's CRI state; the container is the VM:
//
//	CreateContainer ──► created ──StartContainer──► running ──(VM stops)──► exited
//	                       │                                                  ▲
//	                       └─────────────StopContainer (never started)────────┘
//
// RemoveContainer removes a container in any state (stopping a running
// one hard first). While a Start, Stop or Remove is under way the
// container is busy, and a second caller is refused with
// FailedPrecondition. An exited container holds nothing on the node: the
// VM was deleted as it stopped; its record and log file stay.
type containerState string

const (
	containerCreated containerState = "created"
	containerRunning containerState = "running"
	containerExited  containerState = "exited"
)

// containerCheckpointVersion is the version of a container's checkpoint:
// 2 since its VM's record moved to pkg/vmd (a version 1 checkpoint, which
// held the VM too, is skipped).
const containerCheckpointVersion = 2

// containerRecord is what a container is, as checkpointed; its VM is
// pkg/vmd's, under the same id.
type containerRecord struct {
	ID          string            `json:"id"`
	SandboxID   string            `json:"sandboxId"`
	Name        string            `json:"name"`
	Attempt     uint32            `json:"attempt"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	// Image is the image as the request named it, ImageID the stored one.
	Image   string `json:"image"`
	ImageID string `json:"imageId"`
	// Mounts are the container's CRI mounts, its image volumes with the
	// stored images they hold (image_volume.go).
	Mounts  []mountRecord `json:"mounts,omitempty"`
	LogPath string        `json:"logPath,omitempty"`
	// Resources are the container's CPU and memory as created and then
	// as each UpdateContainerResources that succeeded left them: what
	// the VM has, since an update returns only once the VM has it.
	Resources resourcesRecord `json:"resources"`

	State      containerState `json:"state"`
	CreatedAt  int64          `json:"createdAt"`
	StartedAt  int64          `json:"startedAt,omitempty"`
	FinishedAt int64          `json:"finishedAt,omitempty"`
	ExitCode   int32          `json:"exitCode,omitempty"`
	Reason     string         `json:"reason,omitempty"`
	Message    string         `json:"message,omitempty"`
}

// resourcesRecord is the part of the CRI's LinuxContainerResources a VM
// takes; 0 is a field never given.
type resourcesRecord struct {
	CPUPeriod          int64 `json:"cpuPeriod,omitempty"`
	CPUQuota           int64 `json:"cpuQuota,omitempty"`
	CPUShares          int64 `json:"cpuShares,omitempty"`
	MemoryLimitInBytes int64 `json:"memoryLimitInBytes,omitempty"`
}

// merge takes the fields r gives (UpdateContainerResources leaves the
// others as they are, as linuxResources reads them).
func (rr resourcesRecord) merge(r *runtimeapi.LinuxContainerResources) resourcesRecord {
	if v := r.GetCpuPeriod(); v > 0 {
		rr.CPUPeriod = v
	}
	if v := r.GetCpuQuota(); v != 0 {
		rr.CPUQuota = v
	}
	if v := r.GetCpuShares(); v > 0 {
		rr.CPUShares = v
	}
	if v := r.GetMemoryLimitInBytes(); v > 0 {
		rr.MemoryLimitInBytes = v
	}
	return rr
}

// cri is the record as ContainerStatus reports it.
func (rr resourcesRecord) cri() *runtimeapi.ContainerResources {
	if rr == (resourcesRecord{}) {
		return nil
	}
	return &runtimeapi.ContainerResources{Linux: &runtimeapi.LinuxContainerResources{
		CpuPeriod: rr.CPUPeriod, CpuQuota: rr.CPUQuota, CpuShares: rr.CPUShares, MemoryLimitInBytes: rr.MemoryLimitInBytes,
	}}
}

// container is one VM container, its record checkpointed. Its VM is the
// node's VM service's (s.vms) under the container's id, from
// CreateContainer until the VM stopped (wait) or the container is
// removed.
type container struct {
	*ckpt.Store[containerRecord]
	id, sandboxID string // never change

	// log is the CRI log file, console the VM's console output to it and
	// to any attach; set while the VM may write (from Create, or from a
	// restarted server's takeover, until the VM stopped).
	log     *criLog
	console *consoleOut
	// exited is closed when a started VM stopped and its exit is
	// recorded.
	exited chan struct{}

	cpu cpuSampler
}

func newContainer(c Config, rec containerRecord) *container {
	return &container{Store: ckpt.New("container "+rec.ID, c.containerPath(rec.ID), containerCheckpointVersion, rec),
		id: rec.ID, sandboxID: rec.SandboxID}
}

// running is nil when the container's VM runs, FailedPrecondition when
// it does not.
func (s *Server) running(c *container) error {
	if r, err := s.vms.Get(c.id); err == nil && r.State == vmd.Running {
		return nil
	}
	return errorf(errdefs.ErrFailedPrecondition, "container %s is %s, not running", c.id, c.Get().State)
}

// container finds a container by id or unique id prefix.
func (s *Server) container(id string) (*container, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.containers[id]; c != nil {
		return c, nil
	}
	var found *container
	for k, c := range s.containers {
		if id != "" && strings.HasPrefix(k, id) {
			if found != nil {
				return nil, errorf(errdefs.ErrInvalidArgument, "container id prefix %q is ambiguous", id)
			}
			found = c
		}
	}
	if found == nil {
		return nil, notFound("container", id)
	}
	return found, nil
}

// containersOf are the sandbox's containers.
func (s *Server) containersOf(sandboxID string) []*container {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*container
	for _, c := range s.containers {
		if c.sandboxID == sandboxID {
			out = append(out, c)
		}
	}
	return out
}

// containerName is the name the kubelet reserves per container.
func containerName(r containerRecord, sb sandboxRecord) string {
	return strings.Join([]string{r.Name, sb.Name, sb.Namespace, sb.UID, strconv.FormatUint(uint64(r.Attempt), 10)}, "_")
}
