package shim

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
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
	"github.com/vmpod/vmpod/pkg/virt/remote"
	"github.com/vmpod/vmpod/pkg/vm"
	"github.com/vmpod/vmpod/pkg/vmspec"
)

// vmTask is the container task that is the VM: a translation of the task
// API onto a vm.VM, which does the work.
type vmTask struct {
	vm      *vm.VM
	hv      *remote.Client // the pod's libvirt, through helpers
	console *console
	task    *task
	ckpt    checkpoint
	// pressing: a SIGTERM's power button is being pressed again
	// (pressAgain).
	pressing atomic.Bool
}

// createVM translates the task's OCI spec into a vm.Request and has pkg/vm
// make the VM, up to a defined, not yet started domain; the task's
// checkpoint records what the VM holds at each step (vm.Request.Record).
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
	v := &vmTask{task: t, ckpt: checkpoint{ID: r.ID, Kind: "vm", Bundle: r.Bundle, PodDir: p.dir}}
	if v.console, err = openConsole(ctx, r.Stdin, r.Stdout, r.Stderr, r.Terminal); err != nil {
		return nil, err
	}
	defer func() {
		if retErr != nil {
			v.console.close()
		}
	}()
	j, err := p.jail()
	if err != nil {
		return nil, err
	}
	req := vm.Request{
		Spec:   spec,
		Layout: p.layout(),
		Jail:   j,
		Rootfs: filepath.Join(r.Bundle, "rootfs"),
		Network: vm.Network{Netns: p.netns, ResolvConf: vm.MountSource(oci, "/etc/resolv.conf"),
			Hostname: oci.Annotations[vmspec.CRISandboxName]},
		BlockDevices: vm.BlockDevicesOf(oci),
		InstanceID:   oci.Annotations[vmspec.CRISandboxUID],
		Cgroup:       cgPath,
		CPU:          cpu,
		OOMScoreAdj:  oomScoreAdj(oci),
		ConsoleOut:   v.console.output(),
		Record:       v.record,
	}
	if ci := spec.CloudInit; ci != nil && ci.Volume != "" {
		req.CloudInitDir = vm.MountSource(oci, ci.VolumeMountPath)
	}
	if len(r.Rootfs) > 0 {
		req.RootfsMounts = mount.FromProto(r.Rootfs)
	} else if oci.Root != nil && oci.Root.Path != "" {
		req.Rootfs = oci.Root.Path
		if !filepath.IsAbs(req.Rootfs) {
			req.Rootfs = filepath.Join(r.Bundle, req.Rootfs)
		}
	}
	if v.vm, err = vm.Create(ctx, req, p.env); err != nil {
		return nil, err
	}
	v.hv = p.hv // opened by vm.Create (p.env)
	return v, nil
}

// record is the VM's vm.Request.Record: the task's checkpoint, which the
// delete command replays after a dead shim; gone once nothing is held.
func (v *vmTask) record(h vm.Held) error {
	if h.Empty() {
		return removeCheckpoint(v.ckpt.PodDir, v.ckpt.ID)
	}
	v.ckpt.Held = h
	return v.ckpt.save()
}

// start boots the VM and connects the console's stdin.
func (v *vmTask) start(ctx context.Context) (uint32, error) {
	pid, err := v.vm.Start(ctx)
	if err != nil {
		return 0, err
	}
	// Nothing needs libvirt until the pod's delete (a stop is sent on
	// QEMU's monitor): its helper goes now, before the guest uses its RAM.
	if v.hv != nil {
		v.hv.Settle()
	}
	v.console.attach(v.vm.ConsoleInput(), v.vm.ConsoleDone())
	log.G(ctx).WithField("phases", v.vm.Phases().String()).Infof("VM %s started", v.vm.Spec().Name)
	go v.wait()
	return uint32(pid), nil
}

// wait turns the VM's end into the task's exit.
func (v *vmTask) wait() {
	exit, err := v.vm.Wait(context.Background())
	if err != nil {
		log.L.WithError(err).Error("wait for the VM")
	}
	v.console.drain(2 * time.Second)
	if exit.Reason == "OOMKilled" {
		// The CRI marks a container OOMKilled when it saw TaskOOM before the exit.
		v.task.svc.publish(&eventstypes.TaskOOM{ContainerID: v.ckpt.ID})
	}
	log.L.Infof("VM exited: %d %s: %s", exit.Status, exit.Reason, exit.Message)
	v.console.close()
	v.task.onExit(exit.Status, time.Now())
}

func (v *vmTask) kill(ctx context.Context, sig uint32, created bool) error {
	if created {
		// Never started: the task ends now, and the defined VM with it.
		v.task.onExit(128+sig, time.Now())
		return v.vm.Kill(ctx)
	}
	switch unix.Signal(sig) {
	case unix.SIGTERM, unix.SIGINT:
		if err := v.vm.Shutdown(ctx); err != nil {
			return err
		}
		v.pressAgain(ctx)
		return nil
	case unix.SIGKILL:
		return v.vm.Kill(ctx)
	case 0:
		return nil
	default:
		return fmt.Errorf("signal %d: a VM takes SIGTERM or SIGINT (ACPI power button) and SIGKILL (hard stop): %w",
			sig, errdefs.ErrInvalidArgument)
	}
}

// shutdownPressFor bounds how long a SIGTERM's power button is pressed
// again: past the grace period a kubelet gives by default (30 s) and any
// guest's boot, after which one press is heard.
const shutdownPressFor = 10 * time.Minute

// pressAgain presses the power button again, in the background, until the
// VM stops (vm.VM.PressUntilStopped), for at most shutdownPressFor: a
// guest still booting when containerd sends SIGTERM loses that press, and
// containerd sends SIGTERM once, then SIGKILL when its grace period ends.
// One loop per VM, however many SIGTERMs come.
func (v *vmTask) pressAgain(ctx context.Context) {
	if !v.pressing.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer v.pressing.Store(false)
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownPressFor)
		defer cancel()
		if _, err := v.vm.PressUntilStopped(ctx); err != nil && ctx.Err() == nil {
			log.G(ctx).WithError(err).Warnf("VM of %s: pressing the power button again", v.task.id)
		}
	}()
}

func (v *vmTask) pause(ctx context.Context) error      { return v.vm.Suspend(ctx) }
func (v *vmTask) resume(ctx context.Context) error     { return v.vm.Resume(ctx) }
func (v *vmTask) closeStdin()                          { v.console.closeStdin() }
func (v *vmTask) update(r *specs.LinuxResources) error { return v.vm.Update(r) }

func (v *vmTask) stats(context.Context) (*anypb.Any, error) {
	m, err := v.vm.Stats()
	if err != nil {
		return nil, err
	}
	return typeurl.MarshalAnyToProto(m)
}

// delete removes the VM and all it holds; the checkpoint goes with the
// last of it (record).
func (v *vmTask) delete(ctx context.Context) error {
	v.console.close()
	return v.vm.Delete(ctx)
}

// oomScoreAdj is the container's oom_score_adj as containerd's CRI wrote
// it from the kubelet's (already clamped to containerd's own when it runs
// with restrict_oom_score_adj); nil when the spec has none.
func oomScoreAdj(oci *specs.Spec) *int {
	if oci.Process == nil {
		return nil
	}
	return oci.Process.OOMScoreAdj
}
