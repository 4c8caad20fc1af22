package shim

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	eventstypes "github.com/containerd/containerd/api/events"
	taskAPI "github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/containerd/typeurl/v2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/vmpod/vmpod/pkg/podcgroup"
	"github.com/vmpod/vmpod/pkg/podnet"
	"github.com/vmpod/vmpod/pkg/virt"
	"github.com/vmpod/vmpod/pkg/vm"
	"github.com/vmpod/vmpod/pkg/vmspec"
)

const (
	podInterface = "eth0"
	tapName      = "vmpod0"
)

// vmTask is the container task that is the VM.
type vmTask struct {
	pod     *pod
	spec    vmspec.Spec
	machine *vm.Machine
	console *console
	net     *podnet.Attachment
	cgPath  podcgroup.Path // the container's cgroup, under the pod's
	cpu     *specs.LinuxCPU
	limit   uint64 // QEMU's memory limit: guest RAM plus overhead
	cgroup  *podcgroup.Cgroup
	task    *task
	ckpt    checkpoint
}

// createVM does everything up to a defined, not yet started domain. Each
// resource it acquires has its undo deferred right after, so a failure
// leaves no mount, tap, device node, file or domain behind.
func createVM(ctx context.Context, p *pod, r *taskAPI.CreateTaskRequest, oci *specs.Spec, t *task) (_ *vmTask, retErr error) {
	spec, err := vmspec.FromOCI(oci)
	if err != nil {
		return nil, err
	}
	// QEMU runs in the container's cgroup or not at all: a VM is never
	// left uncharged in the shim's cgroup.
	var cgroupsPath string
	var cpu *specs.LinuxCPU
	if oci.Linux != nil {
		cgroupsPath = oci.Linux.CgroupsPath
		if oci.Linux.Resources != nil {
			cpu = oci.Linux.Resources.CPU
		}
	}
	cgPath, err := podcgroup.Parse(cgroupsPath)
	if err != nil {
		return nil, fmt.Errorf("the VM cannot be charged to its pod: %w", err)
	}
	v := &vmTask{pod: p, spec: spec, task: t, cgPath: cgPath, cpu: cpu}
	v.ckpt = checkpoint{ID: r.ID, Kind: "vm", Bundle: r.Bundle, PodDir: p.dir,
		Held: vm.Held{Domain: spec.Name, Netns: p.netns, Cgroup: cgPath.Raw}}
	defer func() {
		if retErr == nil {
			return
		}
		// Undone in full, the task holds nothing: drop its checkpoint so the
		// delete command that follows has nothing to redo. A partial undo
		// keeps it, and that delete retries from it.
		if err := v.release(context.WithoutCancel(ctx)); err != nil {
			log.G(ctx).WithError(err).Warn("undo a failed VM create")
			return
		}
		if err := removeCheckpoint(p.dir, r.ID); err != nil {
			log.G(ctx).WithError(err).Warn("remove the checkpoint of a failed VM create")
		}
	}()

	// The image first: a refused one costs no libvirt.
	rootfs := filepath.Join(r.Bundle, "rootfs")
	if len(r.Rootfs) > 0 {
		if err := mount.All(mount.FromProto(r.Rootfs), rootfs); err != nil {
			return nil, fmt.Errorf("mount the image: %v: %w", err, errdefs.ErrInternal)
		}
		v.ckpt.Rootfs = rootfs
	} else if oci.Root != nil && oci.Root.Path != "" {
		rootfs = oci.Root.Path
		if !filepath.IsAbs(rootfs) {
			rootfs = filepath.Join(r.Bundle, rootfs)
		}
	}
	img, err := vm.InspectImage(ctx, rootfs)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", spec.Image, err)
	}

	rt, h, err := p.hypervisor(ctx)
	if err != nil {
		return nil, err
	}
	v.limit = vm.MemoryLimit(spec, h)
	if err := vm.CheckPodLimit(spec, h, podcgroup.MemoryLimit(v.cgPath.PodDir())); err != nil {
		return nil, err
	}
	qemuJail, err := p.qemuJail()
	if err != nil {
		return nil, err
	}
	if err := p.layout().PrepareVMDir(); err != nil {
		return nil, fmt.Errorf("VM dir: %v: %w", err, errdefs.ErrInternal)
	}

	l := p.layout()
	attachment, nics, err := vm.AttachNetwork(spec, vm.Network{Netns: p.netns, Interface: podInterface, Tap: tapName,
		ResolvConf: resolvConf(oci), Hostname: oci.Annotations[vmspec.CRISandboxName]})
	if err != nil {
		return nil, err
	}
	if attachment != nil {
		v.net = attachment
		v.ckpt.Tap, v.ckpt.PodIf = tapName, podInterface
	}
	vols, made, err := vm.MakeDevices(l, spec, blockDevices(oci))
	v.ckpt.Devices = made
	if err != nil {
		return nil, err
	}
	if err := vm.WriteSeed(l, spec, cloudInitDir(spec, oci), oci.Annotations[vmspec.CRISandboxUID], oci.Annotations[vmspec.CRISandboxName]); err != nil {
		return nil, err
	}
	if v.console, err = openConsole(ctx, r.Stdin, r.Stdout, r.Stderr, r.Terminal); err != nil {
		return nil, err
	}
	if err := v.ckpt.save(); err != nil {
		return nil, fmt.Errorf("checkpoint: %v: %w", err, errdefs.ErrInternal)
	}
	v.machine, err = rt.Create(ctx, vm.Config{Spec: spec, Host: h, Image: img, Layout: p.layout(), NICs: nics, Volumes: vols, Jail: qemuJail,
		ConsoleOut: v.console.output()})
	if err != nil {
		return nil, err
	}
	return v, nil
}

// cloudInitDir is where, on the host, the cloud-init volume the spec
// names is mounted in the container; "" when it takes none or the volume
// is not mounted.
func cloudInitDir(s vmspec.Spec, oci *specs.Spec) string {
	if s.CloudInit == nil || s.CloudInit.Volume == "" {
		return ""
	}
	dir := ""
	for _, m := range oci.Mounts {
		if m.Destination == s.CloudInit.VolumeMountPath {
			dir = m.Source
		}
	}
	return dir
}

// blockDevices are the block devices the kubelet handed the container.
func blockDevices(oci *specs.Spec) []vm.BlockDevice {
	if oci.Linux == nil {
		return nil
	}
	var devs []vm.BlockDevice
	for _, d := range oci.Linux.Devices {
		if d.Type == "b" {
			devs = append(devs, vm.BlockDevice{Path: d.Path, Major: d.Major, Minor: d.Minor})
		}
	}
	return devs
}

// resolvConf is the host file containerd bind-mounts at /etc/resolv.conf.
func resolvConf(oci *specs.Spec) string {
	for _, m := range oci.Mounts {
		if m.Destination == "/etc/resolv.conf" {
			return m.Source
		}
	}
	return ""
}

// start boots the VM. Between QEMU's start and the guest's first
// instruction QEMU moves into the container's cgroup with its memory limit
// (and the Machine attaches the console, writing to the task's stdout).
func (v *vmTask) start(ctx context.Context) (uint32, error) {
	prepare := func(ctx context.Context, pid int) error {
		cg, err := podcgroup.Enter(v.cgPath, pid, podcgroup.Limits{MemoryBytes: v.limit, CPU: v.cpu})
		if err != nil {
			return fmt.Errorf("move QEMU %d into the container's cgroup: %w", pid, err)
		}
		v.cgroup = cg
		return nil
	}
	if err := v.machine.Start(ctx, prepare); err != nil {
		return 0, err
	}
	v.console.attach(v.machine.ConsoleInput(), v.machine.ConsoleDone())
	pid, err := v.machine.PID(ctx)
	if err != nil {
		return 0, err
	}
	go v.wait()
	return uint32(pid), nil
}

// wait turns the VM's end into the task's exit.
func (v *vmTask) wait() {
	exit, err := v.machine.Wait(context.Background())
	if err != nil {
		log.L.WithError(err).Error("wait for the VM")
	}
	v.console.drain(2 * time.Second)
	status := exit.Status
	if v.cgroup != nil && exit.Reason != "Completed" && v.cgroup.OOMKilled() {
		status = 128 + uint32(unix.SIGKILL)
		log.L.Warn("the VM was OOM-killed")
		v.publishOOM()
	}
	log.L.Infof("VM exited: %d %s: %s", status, exit.Reason, exit.Message)
	v.console.close()
	v.task.onExit(status, time.Now())
}

func (v *vmTask) publishOOM() {
	// The CRI marks a container OOMKilled when it saw TaskOOM before the exit.
	v.task.svc.publish(&eventstypes.TaskOOM{ContainerID: v.ckpt.ID})
}

func (v *vmTask) kill(ctx context.Context, sig uint32, created bool) error {
	if created {
		// Never started: the task ends now, and the defined VM with it.
		v.task.onExit(128+sig, time.Now())
		return v.machine.Kill(ctx)
	}
	switch unix.Signal(sig) {
	case unix.SIGTERM, unix.SIGINT:
		return v.machine.Shutdown(ctx)
	case unix.SIGKILL:
		return v.machine.Kill(ctx)
	case 0:
		return nil
	default:
		return fmt.Errorf("signal %d: a VM takes SIGTERM or SIGINT (ACPI power button) and SIGKILL (hard stop): %w",
			sig, errdefs.ErrInvalidArgument)
	}
}

func (v *vmTask) pause(ctx context.Context) error  { return v.machine.Suspend(ctx) }
func (v *vmTask) resume(ctx context.Context) error { return v.machine.Resume(ctx) }
func (v *vmTask) closeStdin()                      { v.console.closeStdin() }

func (v *vmTask) stats(ctx context.Context) (*anypb.Any, error) {
	if v.cgroup == nil {
		return nil, fmt.Errorf("task %s has no cgroup of its own: %w", v.task.id, errdefs.ErrNotFound)
	}
	m, err := v.cgroup.Stats()
	if err != nil {
		return nil, err
	}
	return typeurl.MarshalAnyToProto(m)
}

// update applies new resources: CPU shares and quota change live; guest
// memory and the vCPU count cannot change under a running guest.
func (v *vmTask) update(r *specs.LinuxResources) error {
	if r == nil {
		return nil
	}
	if m := r.Memory; m != nil && m.Limit != nil && uint64(*m.Limit)&^(1<<20-1) != v.spec.MemoryBytes {
		return fmt.Errorf("memory limit %d: a running VM's memory cannot change; recreate the pod: %w",
			*m.Limit, errdefs.ErrFailedPrecondition)
	}
	cpu := r.CPU
	if cpu == nil {
		return nil
	}
	if cpu.Quota != nil && *cpu.Quota > 0 && cpu.Period != nil && *cpu.Period > 0 {
		if n := int((uint64(*cpu.Quota) + *cpu.Period - 1) / *cpu.Period); n > v.spec.VCPUs {
			return fmt.Errorf("cpu limit of %d CPUs: the VM has %d vCPUs, which cannot change while it runs; recreate the pod: %w",
				n, v.spec.VCPUs, errdefs.ErrFailedPrecondition)
		}
	}
	if v.cgroup == nil {
		return fmt.Errorf("the VM is not running in a cgroup of its own: %w", errdefs.ErrFailedPrecondition)
	}
	return v.cgroup.UpdateCPU(cpu)
}

// delete removes the VM and everything createVM and start made.
func (v *vmTask) delete(ctx context.Context) error {
	err := v.release(ctx)
	if rerr := removeCheckpoint(v.pod.dir, v.ckpt.ID); rerr != nil {
		err = errors.Join(err, rerr)
	}
	return err
}

// release undoes createVM and start, in reverse order; safe on a partly
// created task. The in-process parts (the machine, the console, the DHCP
// server) close first; vm.Undo then removes what the checkpoint says the
// task holds, as the cleanup after a dead shim does.
func (v *vmTask) release(ctx context.Context) error {
	var errs []error
	held := v.ckpt.Held
	if v.machine != nil {
		errs = append(errs, v.machine.Delete(ctx))
	}
	var hv virt.Hypervisor
	if v.pod.conn != nil {
		hv = v.pod.conn
	} else {
		held.Domain = "" // libvirt never opened: no domain was made
	}
	if v.console != nil {
		v.console.close()
	}
	if v.net != nil {
		errs = append(errs, v.net.Close())
	}
	errs = append(errs, vm.Undo(ctx, hv, held))
	return errors.Join(errs...)
}
