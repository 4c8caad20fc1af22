package cri

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The layout of a checkpoint archive that containerd and CRI-O write and
// checkpointctl reads (its lib/metadata.go): the runtime's state under
// checkpoint/, the container's config and status as JSON beside it.
const (
	archiveStateDir = "checkpoint"
	archiveConfig   = "config.dump"
	archiveStatus   = "status.dump"
	archiveLog      = "container.log"
	archiveRuntime  = "vmpod" // config.dump's runtime
)

// archiveConfigDump is config.dump: checkpointctl's ContainerConfig, the
// fields vmpod knows.
type archiveConfigDump struct {
	ID              string    `json:"id"`
	Name            string    `json:"name"`
	RootfsImage     string    `json:"rootfsImage,omitempty"`
	RootfsImageRef  string    `json:"rootfsImageRef,omitempty"`
	RootfsImageName string    `json:"rootfsImageName,omitempty"`
	OCIRuntime      string    `json:"runtime,omitempty"`
	CreatedTime     time.Time `json:"createdTime"`
	CheckpointedAt  time.Time `json:"checkpointedTime"`
}

// CheckpointContainer writes a checkpoint archive of a running VM to
// r.Location, as the kubelet's checkpoint API asks: a tar in the layout
// containerd and CRI-O write (checkpointctl's): the VM's state
// (vm.VM.Checkpoint's files) under checkpoint/, with config.dump,
// status.dump and container.log beside it. The VM runs on. A timeout
// (seconds) bounds the whole call.
func (s *Server) CheckpointContainer(ctx context.Context, r *runtimeapi.CheckpointContainerRequest) (*runtimeapi.CheckpointContainerResponse, error) {
	if r.GetLocation() == "" {
		return nil, errorf(errdefs.ErrInvalidArgument, "checkpoint container %s: location: an archive path is required", r.GetContainerId())
	}
	if t := r.GetTimeout(); t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(t)*time.Second)
		defer cancel()
	}
	c, err := s.container(r.GetContainerId())
	if err != nil {
		return nil, err
	}
	rec := c.Get()
	if state := containerStateOf(rec); state != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return nil, errorf(errdefs.ErrFailedPrecondition, "checkpoint container %s: it is %s; only a running container can be checkpointed", rec.ID, state)
	}

	work := filepath.Join(s.cfg.StateRoot, "checkpoints")
	if err := os.MkdirAll(work, 0o700); err != nil {
		return nil, errorf(errdefs.ErrInternal, "checkpoint container %s: %v", rec.ID, err)
	}
	tmp, err := os.MkdirTemp(work, rec.ID[:min(len(rec.ID), 12)]+"-")
	if err != nil {
		return nil, errorf(errdefs.ErrInternal, "checkpoint container %s: %v", rec.ID, err)
	}
	defer os.RemoveAll(tmp)
	state := filepath.Join(tmp, archiveStateDir)
	if err := os.Mkdir(state, 0o700); err != nil {
		return nil, errorf(errdefs.ErrInternal, "checkpoint container %s: %v", rec.ID, err)
	}
	res, err := s.vms.Checkpoint(ctx, rec.ID, state)
	if err != nil {
		return nil, err
	}

	config := archiveConfigDump{ID: rec.ID, Name: rec.Name, RootfsImage: rec.Image, RootfsImageName: rec.Image,
		RootfsImageRef: rec.ImageID, OCIRuntime: archiveRuntime, CreatedTime: time.Unix(0, rec.CreatedAt),
		CheckpointedAt: res.Manifest.Taken}
	status := containerStatus(rec)
	for name, v := range map[string]any{archiveConfig: config, archiveStatus: status} {
		data, err := json.Marshal(v)
		if err == nil {
			err = os.WriteFile(filepath.Join(tmp, name), data, 0o600)
		}
		if err != nil {
			return nil, errorf(errdefs.ErrInternal, "checkpoint container %s: %s: %v", rec.ID, name, err)
		}
	}
	if rec.LogPath != "" {
		if err := copyFile(rec.LogPath, filepath.Join(tmp, archiveLog)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, errorf(errdefs.ErrInternal, "checkpoint container %s: its log: %v", rec.ID, err)
		}
	}
	if err := writeArchive(tmp, r.GetLocation()); err != nil {
		return nil, errorf(errdefs.ErrInternal, "checkpoint container %s: archive %s: %v", rec.ID, r.GetLocation(), err)
	}
	return &runtimeapi.CheckpointContainerResponse{}, nil
}

// copyFile copies src to a new file dst.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// writeArchive tars the files of dir, one level of subdirs deep, into a
// new archive at path (replacing one there, as containerd does), written
// beside it first and renamed into place, so a failure leaves no partial
// archive.
func writeArchive(dir, path string) (retErr error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if retErr != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if !fi.Mode().IsRegular() && !fi.IsDir() {
			return fmt.Errorf("%s: a %s, not a file", rel, fi.Mode().Type())
		}
		h, err := tar.FileInfoHeader(fi, "")
		if err != nil {
			return err
		}
		h.Name = rel
		if fi.IsDir() {
			h.Name += "/"
		}
		h.Uname, h.Gname = "", ""
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if fi.IsDir() {
			return nil
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		_, err = io.Copy(tw, in)
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
