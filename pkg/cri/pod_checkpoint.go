package cri

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// A pod checkpoint (CheckpointPod's dir, RestorePod's) holds an index and
// one dir per container, named after it, with the VM's checkpoint
// (vm.VM.Checkpoint's files, signed as the node signs any).
const (
	podCheckpointIndex   = "vmpod-pod.json"
	podCheckpointVersion = 1
)

// podCheckpoint is the index: what the pod was, and its containers.
type podCheckpoint struct {
	Version        int                      `json:"version"`
	Pod            podCheckpointPod         `json:"pod"`
	RuntimeHandler string                   `json:"runtimeHandler,omitempty"`
	Taken          time.Time                `json:"taken"`
	Containers     []podCheckpointContainer `json:"containers"`
}

type podCheckpointPod struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	UID       string `json:"uid"`
}

// podCheckpointContainer is one container: its name (its dir's), and the
// image its VM ran from, whose disk the checkpoint's overlay lies on.
type podCheckpointContainer struct {
	Name    string `json:"name"`
	Image   string `json:"image"`
	ImageID string `json:"imageID"`
}

// noOptions refuses runtime options: vmpod defines none, and the CRI asks
// a runtime to reject what it does not know rather than ignore it.
func noOptions(what string, opts map[string]string) error {
	if len(opts) == 0 {
		return nil
	}
	keys := make([]string, 0, len(opts))
	for k := range opts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return errorf(errdefs.ErrInvalidArgument, "%s: options: vmpod takes none, got %s", what, strings.Join(keys, ", "))
}

// emptyDir checks that path is an absolute path to an existing, empty dir.
func emptyDir(what, field, path string) error {
	if !filepath.IsAbs(path) {
		return errorf(errdefs.ErrInvalidArgument, "%s: %s %q: an absolute path is required", what, field, path)
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return errorf(errdefs.ErrInvalidArgument, "%s: %s: %v", what, field, err)
	}
	if len(entries) > 0 {
		return errorf(errdefs.ErrInvalidArgument, "%s: %s %s is not empty", what, field, path)
	}
	return nil
}

// CheckpointPod writes a checkpoint of the pod's VM into r.OutputPath, an
// existing empty dir: the index and the VM's checkpoint under the
// container's name. The VM runs on; its vCPUs stop only while its memory
// is written, which is the one consistent cut the CRI asks for (a VM pod
// has one container). r.ContainerIds must be exactly the pod's running
// container. On error everything written into the dir is removed, the dir
// itself kept.
func (s *Server) CheckpointPod(ctx context.Context, r *runtimeapi.CheckpointPodRequest) (_ *runtimeapi.CheckpointPodResponse, retErr error) {
	what := "checkpoint pod " + r.GetPodSandboxId()
	if err := noOptions(what, r.GetOptions()); err != nil {
		return nil, err
	}
	out := r.GetOutputPath()
	if err := emptyDir(what, "output_path", out); err != nil {
		return nil, err
	}
	sb, err := s.sandbox(r.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	sbRec := sb.Get()
	if sbRec.State != sandboxReady {
		return nil, errorf(errdefs.ErrFailedPrecondition, "%s: the sandbox is not ready", what)
	}
	var running []string
	for _, c := range s.containersOf(sbRec.ID) {
		if rec := c.Get(); containerStateOf(rec) == runtimeapi.ContainerState_CONTAINER_RUNNING {
			running = append(running, rec.ID)
		}
	}
	asked := slices.Clone(r.GetContainerIds())
	slices.Sort(asked)
	slices.Sort(running)
	if len(asked) == 0 || !slices.Equal(asked, running) {
		return nil, errorf(errdefs.ErrInvalidArgument, "%s: container_ids %v: must be exactly the pod's running containers %v, each once",
			what, r.GetContainerIds(), running)
	}

	// Everything below goes into out; an error takes it out again.
	defer func() {
		if retErr != nil {
			if err := clearDir(out); err != nil {
				log.G(ctx).WithError(err).Warnf("%s: remove the partial checkpoint", what)
			}
		}
	}()
	index := podCheckpoint{Version: podCheckpointVersion, RuntimeHandler: sbRec.RuntimeHandler,
		Pod: podCheckpointPod{Name: sbRec.Name, Namespace: sbRec.Namespace, UID: sbRec.UID}}
	for _, id := range asked {
		c, err := s.container(id)
		if err != nil {
			return nil, err
		}
		rec := c.Get()
		dir := filepath.Join(out, rec.Name)
		if err := os.Mkdir(dir, 0o700); err != nil {
			return nil, errorf(errdefs.ErrInternal, "%s: %v", what, err)
		}
		res, err := s.vms.Checkpoint(ctx, rec.ID, dir)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		index.Taken = res.Manifest.Taken
		index.Containers = append(index.Containers, podCheckpointContainer{Name: rec.Name, Image: rec.Image, ImageID: rec.ImageID})
	}
	data, err := json.MarshalIndent(index, "", "  ")
	if err == nil {
		err = writeFileSync(filepath.Join(out, podCheckpointIndex), data)
	}
	if err != nil {
		return nil, errorf(errdefs.ErrInternal, "%s: %s: %v", what, podCheckpointIndex, err)
	}
	return &runtimeapi.CheckpointPodResponse{}, nil
}

// clearDir removes what dir holds, not dir.
func clearDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		errs = append(errs, os.RemoveAll(filepath.Join(dir, e.Name())))
	}
	return errors.Join(errs...)
}

// writeFileSync writes a new file and syncs it.
func writeFileSync(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// readPodCheckpoint reads and checks a pod checkpoint's index.
func readPodCheckpoint(what, dir string) (podCheckpoint, error) {
	var index podCheckpoint
	if !filepath.IsAbs(dir) {
		return index, errorf(errdefs.ErrInvalidArgument, "%s: checkpoint_path %q: an absolute path is required", what, dir)
	}
	data, err := os.ReadFile(filepath.Join(dir, podCheckpointIndex))
	if err != nil {
		return index, errorf(errdefs.ErrInvalidArgument, "%s: checkpoint_path %s: not a vmpod pod checkpoint: %v", what, dir, err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&index); err != nil {
		return index, errorf(errdefs.ErrInvalidArgument, "%s: %s: %v", what, podCheckpointIndex, err)
	}
	if index.Version != podCheckpointVersion {
		return index, errorf(errdefs.ErrInvalidArgument, "%s: %s: version %d, this vm-runtime reads %d", what, podCheckpointIndex, index.Version, podCheckpointVersion)
	}
	if len(index.Containers) != 1 {
		return index, errorf(errdefs.ErrInvalidArgument, "%s: %s: %d containers, a VM pod has one", what, podCheckpointIndex, len(index.Containers))
	}
	for _, c := range index.Containers {
		if c.Name == "" || c.Name != filepath.Base(c.Name) || c.Name == "." || c.Name == ".." {
			return index, errorf(errdefs.ErrInvalidArgument, "%s: %s: container name %q", what, podCheckpointIndex, c.Name)
		}
	}
	return index, nil
}

// RestorePod makes a pod from a pod checkpoint (CheckpointPod's): a new
// sandbox of r.Config, and its container of r.ContainerConfigs created
// with its VM restored from the checkpoint instead of booted, not started:
// StartContainer resumes the guest where it was. The checkpoint is read,
// never changed, and must stay until the container starts; its signature
// must be one the node trusts. On error the sandbox and container are
// removed.
func (s *Server) RestorePod(ctx context.Context, r *runtimeapi.RestorePodRequest) (_ *runtimeapi.RestorePodResponse, retErr error) {
	what := "restore pod from " + r.GetCheckpointPath()
	if err := noOptions(what, r.GetOptions()); err != nil {
		return nil, err
	}
	index, err := readPodCheckpoint(what, r.GetCheckpointPath())
	if err != nil {
		return nil, err
	}
	if h := r.GetRuntimeHandler(); h != "" && h != index.RuntimeHandler {
		return nil, errorf(errdefs.ErrInvalidArgument, "%s: runtime_handler %q: the checkpoint was taken under %q", what, h, index.RuntimeHandler)
	}
	want := map[string]podCheckpointContainer{}
	for _, c := range index.Containers {
		want[c.Name] = c
	}
	cfgs := r.GetContainerConfigs()
	seen := map[string]bool{}
	for _, cfg := range cfgs {
		name := cfg.GetMetadata().GetName()
		c, ok := want[name]
		switch {
		case name == "" || seen[name]:
			return nil, errorf(errdefs.ErrInvalidArgument, "%s: container_configs: name %q: each must have a name of its own", what, name)
		case !ok:
			return nil, errorf(errdefs.ErrInvalidArgument, "%s: container_configs: %q is not in the checkpoint, which has %s", what, name, index.names())
		}
		seen[name] = true
		img, ok := s.images.Get(cfg.GetImage().GetImage())
		if !ok {
			return nil, errorf(errdefs.ErrNotFound, "%s: container %s: image %q is not pulled", what, name, cfg.GetImage().GetImage())
		}
		if img.ID != c.ImageID {
			return nil, errorf(errdefs.ErrFailedPrecondition, "%s: container %s: image %q is %s, the checkpoint's VM ran from %s (%s)",
				what, name, cfg.GetImage().GetImage(), img.ID, c.Image, c.ImageID)
		}
	}
	if len(seen) != len(want) {
		return nil, errorf(errdefs.ErrInvalidArgument, "%s: container_configs: %d given, the checkpoint has %s", what, len(cfgs), index.names())
	}

	sb, err := s.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: r.GetConfig(), RuntimeHandler: index.RuntimeHandler})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer func() {
		if retErr != nil {
			if _, err := s.RemovePodSandbox(context.WithoutCancel(ctx), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.PodSandboxId}); err != nil {
				log.G(ctx).WithError(err).Warnf("%s: remove the sandbox %s", what, sb.PodSandboxId)
			}
		}
	}()
	resp := &runtimeapi.RestorePodResponse{PodSandboxId: sb.PodSandboxId}
	for _, cfg := range cfgs {
		name := cfg.GetMetadata().GetName()
		c, err := s.createContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sb.PodSandboxId, Config: cfg, SandboxConfig: r.GetConfig()},
			filepath.Join(r.GetCheckpointPath(), name))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		resp.RestoredContainers = append(resp.RestoredContainers, &runtimeapi.RestoredContainer{Name: name, ContainerId: c.ContainerId})
	}
	return resp, nil
}

func (p podCheckpoint) names() string {
	var names []string
	for _, c := range p.Containers {
		names = append(names, c.Name)
	}
	return strings.Join(names, ", ")
}
