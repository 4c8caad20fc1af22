package cri

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/vmpod/vmpod/pkg/podcgroup"
	"github.com/vmpod/vmpod/pkg/vm"
	"github.com/vmpod/vmpod/pkg/vmd"
	"github.com/vmpod/vmpod/pkg/vmspec"
)

// CreateContainer makes the pod's VM up to a defined, not yet started
// domain, through the node's VM service (vmd.Service.Create). A pod has
// one VM: a second container while the first has not exited is refused.
func (s *Server) CreateContainer(ctx context.Context, r *runtimeapi.CreateContainerRequest) (*runtimeapi.CreateContainerResponse, error) {
	return s.createContainer(ctx, r, "")
}

// createContainer is CreateContainer, of a VM restored from the
// checkpoint dir from when it is not "" (RestorePod).
func (s *Server) createContainer(ctx context.Context, r *runtimeapi.CreateContainerRequest, from string) (_ *runtimeapi.CreateContainerResponse, retErr error) {
	defer func() { retErr = vm.StorageError(retErr, s.cfg.StateRoot) }() // runs last: after the undo
	sb, err := s.sandbox(r.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	sbRec := sb.Get()
	if sbRec.State != sandboxReady {
		return nil, errorf(errdefs.ErrFailedPrecondition, "sandbox %s is not ready", sbRec.ID)
	}
	cfg := r.GetConfig()
	if cfg.GetMetadata().GetName() == "" {
		return nil, errorf(errdefs.ErrInvalidArgument, "container metadata needs a name")
	}
	for _, other := range s.containersOf(sbRec.ID) {
		if o := other.Get(); o.State != containerExited {
			return nil, errorf(errdefs.ErrFailedPrecondition,
				"sandbox %s has container %s (%s) %s: a VM pod has exactly one container", sbRec.ID, o.Name, o.ID, o.State)
		}
	}
	// Held until the container is in s.containers (the deferred release
	// runs after it is), so RemoveImage cannot take it in between.
	img, release, err := s.useImage(cfg.GetImage().GetImage())
	if err != nil {
		return nil, err
	}
	defer release()
	rootfs, err := s.images.Rootfs(img.ID)
	if err != nil {
		return nil, err
	}
	// The images mounted as volumes, held the same way.
	imageSources, mounts, releaseVolumes, err := s.imageVolumes(sbRec.ID, cfg)
	defer releaseVolumes()
	if err != nil {
		return nil, err
	}

	id := newID()
	rec := containerRecord{
		ID: id, SandboxID: sbRec.ID, Name: cfg.GetMetadata().GetName(), Attempt: cfg.GetMetadata().GetAttempt(),
		Labels: cfg.GetLabels(), Annotations: cfg.GetAnnotations(),
		Image: cfg.GetImage().GetImage(), ImageID: img.ID, Mounts: mounts,
		Resources: resourcesRecord{}.merge(cfg.GetLinux().GetResources()),
		State:     containerCreated, CreatedAt: time.Now().UnixNano(),
	}
	if sbRec.LogDir != "" && cfg.GetLogPath() != "" {
		rec.LogPath = filepath.Join(sbRec.LogDir, cfg.GetLogPath())
	}
	name := containerName(rec, sbRec)
	if err := s.reserve(name, id); err != nil {
		return nil, err
	}
	defer func() {
		if retErr != nil {
			s.release(name, id)
		}
	}()

	cg, err := containerCgroup(s.podCgroupParent(sbRec), id)
	if err != nil {
		return nil, err
	}
	req, err := vmRequest(id, sbRec, cfg, img, rootfs, imageSources, cg, s.resolvConf(sbRec.ID), s.cfg.Mounts)
	if err != nil {
		return nil, err
	}

	c := newContainer(s.cfg, rec)
	if err := c.Update(func(r *containerRecord) error { *r = rec; return nil }); err != nil {
		return nil, err
	}
	defer func() {
		if retErr != nil {
			c.Remove()
		}
	}()
	if c.log, err = openCRILog(rec.LogPath); err != nil {
		return nil, errorf(errdefs.ErrInternal, "container log: %v", err)
	}
	defer func() {
		if retErr != nil {
			c.log.Close()
		}
	}()
	c.console = newConsoleOut(c.log)

	req.Console = c.console
	req.From = from
	if err := s.vms.Create(ctx, req); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.containers[id] = c
	s.mu.Unlock()
	log.G(ctx).Infof("container %s of sandbox %s: VM %s defined", id, sbRec.ID, req.Spec.Name)
	return &runtimeapi.CreateContainerResponse{ContainerId: id}, nil
}

// vmRequest is the VM the container asks for: the OCI spec containerd
// would hand its shim (ociSpec, with the image's root, its image volumes'
// dirs, the container's cgroup cg and the pod's resolv.conf) through
// vmd.FromOCI under the node's mount rules, the mapping both front doors
// share.
func vmRequest(id string, sb sandboxRecord, cfg *runtimeapi.ContainerConfig, img image, rootfs string, imageSources map[int]string,
	cg podcgroup.Path, resolvConf string, rules vmspec.MountRules) (vmd.CreateRequest, error) {
	oci, err := ociSpec(sb, cfg, img, imageSources)
	if err != nil {
		return vmd.CreateRequest{}, err
	}
	oci.Root = &specs.Root{Path: rootfs, Readonly: true}
	oci.Linux.CgroupsPath = cg.Raw
	oci.Mounts = append(oci.Mounts, specs.Mount{Destination: "/etc/resolv.conf", Source: resolvConf, Type: "bind"})
	req, err := vmd.FromOCI(id, sb.ID, oci, "", nil, sb.Netns, rules)
	if err != nil {
		return vmd.CreateRequest{}, err
	}
	req.Network.Interface = podInterface
	return req, nil
}

// ociSpec is the OCI runtime spec containerd's CRI plugin would write for
// the container, as far as vmspec.FromOCI reads it: the CRI annotations,
// the pod's and the container's vmpod.io/ annotations, the resources, the
// block devices and the mounts, an image volume (by its index in cfg's
// mounts) as a read-only bind of the dir imageSources names, as
// containerd binds the image it mounted. So a pod means the same VM
// through either front door.
func ociSpec(sb sandboxRecord, cfg *runtimeapi.ContainerConfig, img image, imageSources map[int]string) (*specs.Spec, error) {
	ann := map[string]string{}
	for _, src := range []map[string]string{sb.Annotations, cfg.GetAnnotations()} {
		for k, v := range src {
			if ok, _ := path.Match("vmpod.io/*", k); ok {
				ann[k] = v
			}
		}
	}
	maps.Copy(ann, map[string]string{
		vmspec.CRIContainerType:    vmspec.CRIContainerTypeCntr,
		vmspec.CRIContainerName:    cfg.GetMetadata().GetName(),
		vmspec.CRIImageName:        cfg.GetImage().GetImage(),
		vmspec.CRISandboxID:        sb.ID,
		vmspec.CRISandboxName:      sb.Name,
		vmspec.CRISandboxNamespace: sb.Namespace,
		vmspec.CRISandboxUID:       sb.UID,
	})
	res := cfg.GetLinux().GetResources()
	spec := &specs.Spec{
		Hostname:    sb.Hostname,
		Annotations: ann,
		Process:     &specs.Process{},
		Linux:       &specs.Linux{Resources: &specs.LinuxResources{CPU: &specs.LinuxCPU{}, Memory: &specs.LinuxMemory{}}},
	}
	if v := res.GetMemoryLimitInBytes(); v > 0 {
		spec.Linux.Resources.Memory.Limit = &v
	}
	if v := res.GetCpuPeriod(); v > 0 {
		p := uint64(v)
		spec.Linux.Resources.CPU.Period = &p
	}
	if v := res.GetCpuQuota(); v > 0 {
		spec.Linux.Resources.CPU.Quota = &v
	}
	if v := res.GetCpuShares(); v > 0 {
		sh := uint64(v)
		spec.Linux.Resources.CPU.Shares = &sh
	}
	if res != nil {
		// The kubelet's for the container's QoS class, as containerd
		// passes it to its runtimes; the jail clamps a value below
		// what this process may set.
		adj := int(res.GetOomScoreAdj())
		spec.Process.OOMScoreAdj = &adj
	}
	if cfg.GetLinux().GetSecurityContext().GetPrivileged() {
		// What containerd writes for a privileged container, which
		// FromOCI refuses with its reason.
		spec.Process.Capabilities = &specs.LinuxCapabilities{Bounding: []string{"CAP_SYS_ADMIN", "CAP_SYS_MODULE"}}
	}
	devs, err := blockDevices(cfg.GetDevices())
	if err != nil {
		return nil, err
	}
	for _, d := range devs {
		spec.Linux.Devices = append(spec.Linux.Devices, specs.LinuxDevice{Path: d.Path, Type: "b", Major: d.Major, Minor: d.Minor})
	}
	for i, m := range cfg.GetMounts() {
		if m.GetImage() != nil {
			src, ok := imageSources[i]
			if !ok {
				return nil, errorf(errdefs.ErrInternal, "mount %s of image %q: not resolved", m.GetContainerPath(), m.GetImage().GetImage())
			}
			spec.Mounts = append(spec.Mounts, specs.Mount{Destination: m.GetContainerPath(), Source: src, Type: "bind",
				Options: []string{"rbind", "rprivate", "ro"}})
			continue
		}
		spec.Mounts = append(spec.Mounts, bindMount(m))
	}
	return spec, nil
}

// bindMount is the mount containerd's CRI writes for a CRI mount
// (internal/cri/opts withMounts), as far as vmspec's mount rules read it:
// a bind mount (type bind, option rbind), read-only ("ro") or not ("rw").
// Propagation is always rprivate: nothing mounted on the host later
// reaches a guest. containerd's "rro" (recursive_read_only) is not
// written: this server does not offer it to the kubelet, and the jail of
// a share's file server makes a read-only share read-only all through
// (pkg/jail).
func bindMount(m *runtimeapi.Mount) specs.Mount {
	mode := "rw"
	if m.GetReadonly() {
		mode = "ro"
	}
	return specs.Mount{Destination: m.GetContainerPath(), Source: m.GetHostPath(), Type: "bind",
		Options: []string{"rbind", "rprivate", mode}}
}

// blockDevices are the block devices the kubelet hands the container (its
// volumeDevices), by their numbers on the host; others are ignored.
func blockDevices(devs []*runtimeapi.Device) ([]vm.BlockDevice, error) {
	var out []vm.BlockDevice
	for _, d := range devs {
		var st unix.Stat_t
		if err := unix.Stat(d.GetHostPath(), &st); err != nil {
			return nil, errorf(errdefs.ErrInvalidArgument, "device %s: %v", d.GetHostPath(), err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFBLK {
			continue
		}
		out = append(out, vm.BlockDevice{Path: d.GetContainerPath(),
			Major: int64(unix.Major(st.Rdev)), Minor: int64(unix.Minor(st.Rdev))})
	}
	return out, nil
}

// containerCgroup is QEMU's cgroup: the container's, under the pod's
// cgroup parent, in the form of the parent's driver, as containerd names
// it (cgroupfs: <parent>/<id>; systemd: <parent slice>:cri-vmpod:<id>).
func containerCgroup(parent, id string) (podcgroup.Path, error) {
	if path.Ext(parent) == ".slice" {
		return podcgroup.Parse(fmt.Sprintf("%s:cri-vmpod:%s", parent, id))
	}
	return podcgroup.Parse(path.Join(parent, id))
}

// podCgroupParent is the pod's cgroup: the sandbox's cgroup_parent, or,
// when it names none (critest sends none; a kubelet always does), a
// cgroupfs one of vmpod's own, <Config.DefaultCgroupParent>/pod<sandbox
// id>, which RemovePodSandbox removes. It has no limits of its own, so
// such a VM is bounded by its container's limits (guest RAM plus
// overhead) alone.
func (s *Server) podCgroupParent(sb sandboxRecord) string {
	if sb.CgroupParent != "" {
		return sb.CgroupParent
	}
	return s.defaultPodCgroup(sb.ID)
}

func (s *Server) defaultPodCgroup(sandboxID string) string {
	return path.Join(s.cfg.DefaultCgroupParent, "pod"+sandboxID)
}

// removeDefaultPodCgroup removes the pod cgroup podCgroupParent made for a
// sandbox without a cgroup_parent, once no VM is in it.
func (s *Server) removeDefaultPodCgroup(sb sandboxRecord) error {
	if sb.CgroupParent != "" {
		return nil
	}
	p, err := podcgroup.Parse(s.defaultPodCgroup(sb.ID))
	if err != nil {
		return err
	}
	if err := podcgroup.Remove(p); err != nil {
		return errorf(errdefs.ErrInternal, "the pod's cgroup %s: %v", p.Dir, err)
	}
	return nil
}

// exists says whether p exists (for the cleanup checks of recover).
func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}
