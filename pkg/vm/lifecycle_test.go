package vm_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cgroup1stats "github.com/containerd/cgroups/v3/cgroup1/stats"
	cgroup2stats "github.com/containerd/cgroups/v3/cgroup2/stats"
	"github.com/containerd/containerd/v2/core/mount"
	"github.com/moby/sys/mountinfo"

	"github.com/vmpod/vmpod/pkg/podcgroup"
	"github.com/vmpod/vmpod/pkg/vm"
	"github.com/vmpod/vmpod/pkg/vmspec"
)

// records collects what a VM reports holding (vm.Request.Record).
type records struct{ list []vm.Held }

func (r *records) record(h vm.Held) error {
	r.list = append(r.list, h)
	return nil
}

// last is the latest record, or a zero Held before the first.
func (r *records) last() vm.Held {
	if len(r.list) == 0 {
		return vm.Held{}
	}
	return r.list[len(r.list)-1]
}

// lifecycleRequest is a Request for the test guest as the pod in
// testdata/podFile, named name, with its image bind-mounted as a runtime
// mounts a snapshot, in a cgroup of its own under a pod cgroup the test
// removes at its end.
func lifecycleRequest(t testing.TB, podFile, name, dir string, rec *records) vm.Request {
	t.Helper()
	pod := podFromFile(t, podFile)
	pod.Name = name
	spec, err := vmspec.FromPod(pod)
	if err != nil {
		t.Fatal(err)
	}
	podCgroup := fmt.Sprintf("/vmpod-test-%d-%s", os.Getpid(), name)
	cg, err := podcgroup.Parse(podCgroup + "/vm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pcg, _ := podcgroup.Parse(podCgroup)
		if err := podcgroup.Remove(pcg); err != nil {
			t.Error(err)
		}
	})
	rootfs := filepath.Join(t.TempDir(), "rootfs")
	if err := os.Mkdir(rootfs, 0o755); err != nil {
		t.Fatal(err)
	}
	return vm.Request{
		Spec:         spec,
		Layout:       vm.Layout{Dir: dir},
		Rootfs:       rootfs,
		RootfsMounts: []mount.Mount{{Type: "bind", Source: containerdiskRootfs(t), Options: []string{"rbind", "ro"}}},
		Cgroup:       cg,
		Record:       rec.record,
	}
}

func assertNotMounted(t *testing.T, path string) {
	t.Helper()
	if mounted, err := mountinfo.Mounted(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Error(err)
	} else if mounted {
		t.Errorf("%s is still mounted", path)
		_ = mount.UnmountAll(path, 0)
	}
}

// TestVMLifecycle runs the test guest through the API the front doors
// use: Create from a Request (the image mounted, a cgroup of its own),
// Start, Exec through the guest agent, Stats, Stop with a grace period
// (ACPI, the guest powers off), Delete; what the VM records holding at
// each step; and that nothing is left.
func TestVMLifecycle(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rt, h, root := runtimeForTest(t)
	dir, err := os.MkdirTemp(root, "pod-")
	if err != nil {
		t.Fatal(err)
	}
	var rec records
	req := lifecycleRequest(t, "boot-pod.yaml", "lifecycle", dir, &rec)
	req.Jail = jailForTest(t, root, dir)
	opened := 0
	open := func(context.Context) (vm.Env, error) {
		opened++
		return vm.Env{Runtime: rt, Host: h}, nil
	}

	v, err := vm.Create(ctx, req, open)
	if err != nil {
		t.Fatal(err)
	}
	deleted := false
	t.Cleanup(func() {
		if !deleted {
			_ = v.Delete(context.Background())
		}
	})
	if opened != 1 {
		t.Errorf("the Opener ran %d times, want once", opened)
	}
	if len(rec.list) == 0 || rec.list[0].Rootfs != req.Rootfs || rec.list[0].Domain != "" {
		t.Errorf("first record %+v: want the image mount recorded before anything else", rec.list)
	}
	if got := rec.last(); got.Domain != req.Spec.Name || got.Rootfs != req.Rootfs || got.Cgroup != "" {
		t.Errorf("record after Create = %+v, want the domain %s and the mount, no cgroup yet", got, req.Spec.Name)
	}
	if mounted, err := mountinfo.Mounted(req.Rootfs); err != nil || !mounted {
		t.Errorf("image not mounted at %s after Create: %v", req.Rootfs, err)
	}

	// Stopping a VM that never started has nothing to wait for (a CRI
	// StopContainer of a created container); it must not wait for an exit
	// that cannot come.
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	if _, err := v.Stop(sctx, time.Minute); err != nil {
		t.Errorf("Stop before Start: %v, want it to return at once", err)
	}
	scancel()

	logFrom := int64(0)
	if fi, err := os.Stat(qmpLog); err == nil {
		logFrom = fi.Size()
	}
	pid, err := v.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// libvirt does not read the guest's CPU back one QOM property at a
	// time (about 400 qom-gets, up to 1 s of the start): the capability
	// that makes it is masked in its cache (pkg/virt/libvirt).
	if qmpLog != "" {
		sent := qmpCommands(t, logFrom)
		if sent["cont"]+sent["query-status"] == 0 {
			t.Errorf("no QMP command of the start in libvirt's log %s: %v", qmpLog, sent)
		}
		if sent["qom-get"] > 10 {
			t.Errorf("libvirt sent %d qom-get at the start (%v): it read the guest's CPU back property by property", sent["qom-get"], sent)
		}
	}
	// QEMU runs under two seccomp filters: the jailer's allow list, in
	// place from its first instruction, and its own -sandbox.
	if status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err != nil {
		t.Error(err)
	} else if f := procStatusField(string(status), "Seccomp_filters"); f != "" && f != "2" {
		t.Errorf("QEMU %d runs under %s seccomp filters, want 2 (the jailer's allow list and its own)", pid, f)
	} else if f == "" && procStatusField(string(status), "Seccomp") != "2" {
		t.Errorf("QEMU %d runs under no seccomp filter", pid)
	}
	if got := rec.last(); got.Cgroup != req.Cgroup.Raw {
		t.Errorf("record after Start = %+v, want the cgroup %s", got, req.Cgroup.Raw)
	}
	procs, err := os.ReadFile(cgroupProcs(req.Cgroup))
	if err != nil || !strings.Contains("\n"+string(procs), fmt.Sprintf("\n%d\n", pid)) {
		t.Errorf("QEMU %d is not in its cgroup %s: %q, %v", pid, req.Cgroup.Dir, procs, err)
	}
	// QEMU started in its cgroup (its jailer entered it): what it read
	// and set up before the guest ran, the kernel and initrd above all,
	// is charged there, not to the runtime that started it.
	var loaded int64
	for _, f := range []string{"boot/vmlinuz", "boot/initrd.img"} {
		fi, err := os.Stat(filepath.Join(containerdiskRootfs(t), f))
		if err != nil {
			t.Fatal(err)
		}
		loaded += fi.Size()
	}
	if got := v.StartMemory(); got < uint64(loaded) {
		t.Errorf("QEMU's cgroup held %d bytes when QEMU had started, want at least the %d bytes of kernel and initrd it loaded", got, loaded)
	}
	watchConsole(t, req.Layout.ConsoleLog()).waitFor(ctx, t, "VMPOD-GUEST: ready")

	res, err := v.Exec(ctx, vm.ExecRequest{Args: []string{"/bin/sh", "-c", "echo hello from $(hostname); exit 3"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 3 || !strings.HasPrefix(string(res.Stdout), "hello from ") {
		t.Errorf("exec = %+v, want exit 3 and the greeting", res)
	}

	stats, err := v.Stats()
	if err != nil {
		t.Fatal(err)
	}
	var memory, cpu uint64
	switch m := stats.(type) {
	case *cgroup1stats.Metrics:
		memory, cpu = m.GetMemory().GetUsage().GetUsage(), m.GetCPU().GetUsage().GetTotal()
	case *cgroup2stats.Metrics:
		memory, cpu = m.GetMemory().GetUsage(), m.GetCPU().GetUsageUsec()
	default:
		t.Fatalf("stats of type %T", stats)
	}
	if memory < 16<<20 || cpu == 0 {
		t.Errorf("stats: memory %d bytes, CPU %d: want a booted guest's (QEMU holds more than 16 MiB)", memory, cpu)
	}

	exit, err := v.Stop(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if exit.Status != 0 || exit.Reason != "Completed" {
		t.Errorf("Stop: exit %+v, want the guest powered off (0, Completed)", exit)
	}

	deleted = true
	if err := v.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	// The CRI server's exit watcher deletes a VM as soon as it stops,
	// while a StopContainer that killed it may still be in Stop: after
	// Delete the VM still answers with its exit (CI's critest run panicked
	// on a nil machine there), and a second Delete is no error.
	if exit, err := v.Wait(ctx); err != nil || exit.Reason != "Completed" {
		t.Errorf("Wait after Delete: %+v, %v; want the exit, Completed", exit, err)
	}
	if exit, err := v.Stop(ctx, time.Second); err != nil || exit.Reason != "Completed" {
		t.Errorf("Stop after Delete: %+v, %v; want the exit, Completed", exit, err)
	}
	if err := v.Delete(ctx); err != nil {
		t.Errorf("second Delete: %v", err)
	}
	if got := rec.last(); !got.Empty() {
		t.Errorf("last record %+v, want nothing held", got)
	}
	assertGone(t, rt, req.Spec.Name, pid, dir)
	assertNotMounted(t, req.Rootfs)
	if _, err := os.Stat(cgroupProcs(req.Cgroup)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cgroup %s left: %v", req.Cgroup.Dir, err)
	}
}

// cgroupProcs is the cgroup.procs file of a cgroupfs cgroup (the memory
// hierarchy's on cgroup v1).
func cgroupProcs(p podcgroup.Path) string {
	if podcgroup.Unified() {
		return filepath.Join(podcgroup.Root, p.Dir, "cgroup.procs")
	}
	return filepath.Join(podcgroup.Root, "memory", p.Dir, "cgroup.procs")
}

// TestCreateUndoesOnFailure: a Create that fails undoes all it did and
// says so through Record; an image refused at intake costs no Opener.
func TestCreateUndoesOnFailure(t *testing.T) {
	ctx := context.Background()
	t.Run("opener fails", func(t *testing.T) {
		var rec records
		dir := t.TempDir()
		req := lifecycleRequest(t, "boot-pod.yaml", "failing", dir, &rec)
		req.Jail = jailForTest(t, t.TempDir(), dir)
		boom := errors.New("no hypervisor on this node")
		_, err := vm.Create(ctx, req, func(context.Context) (vm.Env, error) { return vm.Env{}, boom })
		if !errors.Is(err, boom) {
			t.Fatalf("Create = %v, want the Opener's error", err)
		}
		if len(rec.list) < 2 || rec.list[0].Rootfs != req.Rootfs || !rec.last().Empty() {
			t.Errorf("records %+v: want the mount recorded, then nothing held", rec.list)
		}
		assertNotMounted(t, req.Rootfs)
	})
	t.Run("image refused", func(t *testing.T) {
		var rec records
		req := lifecycleRequest(t, "boot-pod.yaml", "refused", t.TempDir(), &rec)
		req.RootfsMounts = nil // an empty dir: an image with no disk and no kernel
		_, err := vm.Create(ctx, req, func(context.Context) (vm.Env, error) {
			t.Error("the Opener ran for a refused image")
			return vm.Env{}, errors.New("unexpected")
		})
		if err == nil || !strings.Contains(err.Error(), "image") {
			t.Fatalf("Create = %v, want the image refused", err)
		}
		if !rec.last().Empty() {
			t.Errorf("records %+v, want nothing held", rec.list)
		}
	})
}

// procStatusField is the value of key in a /proc/PID/status, or "" (a
// kernel before 5.9 has no Seccomp_filters).
func procStatusField(status, key string) string {
	for _, line := range strings.Split(status, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && k == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
