package vm_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/vmpod/vmpod/internal/procmem"
	"github.com/vmpod/vmpod/pkg/host"
	"github.com/vmpod/vmpod/pkg/podcgroup"
	"github.com/vmpod/vmpod/pkg/vm"
)

// TestVMResize resizes the running test guest through VM.Update as both
// front doors do: vCPUs 1 -> 2 -> 1 and memory 256 -> 512 -> 256 MiB,
// the guest's nproc and MemTotal after each, QEMU's cgroup limit
// following; what is beyond the maxima or below the boot memory is
// refused and changes nothing; a shrink the guest cannot give all of (a
// tmpfs in the guest holding the memory) gives back what the guest can
// spare, keeping it 64 MiB available, and ends in an error naming what
// the guest kept, with the guest alive and QEMU's limit above what it
// holds.
func TestVMResize(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	v, req, h := startResizable(ctx, t)

	guest := func() (int, int) {
		t.Helper()
		r, err := v.Exec(ctx, vm.ExecRequest{Args: []string{"sh", "-c", `echo $(nproc) $(sed -n 's/^MemTotal: *\([0-9]*\) kB/\1/p' /proc/meminfo)`}})
		if err != nil {
			t.Fatal(err)
		}
		f := strings.Fields(string(r.Stdout))
		if len(f) != 2 {
			t.Fatalf("guest said %q", r.Stdout)
		}
		n, _ := strconv.Atoi(f[0])
		kib, _ := strconv.Atoi(f[1])
		return n, kib
	}
	qemuLimit := func() uint64 { return podcgroup.MemoryLimit(req.Cgroup.Dir) }
	n, base := guest()
	if n != 1 {
		t.Fatalf("the guest boots with %d vCPUs online, want 1", n)
	}
	if got, want := qemuLimit(), vm.MemoryLimit(req.Spec, h); got != want {
		t.Errorf("QEMU's memory limit at boot = %d, want %d", got, want)
	}

	for _, step := range []struct {
		vcpus  int
		memMiB int64
	}{{2, 256}, {2, 512}, {1, 512}, {1, 256}} {
		start := time.Now()
		if err := v.Update(ctx, resources(step.vcpus, step.memMiB)); err != nil {
			t.Fatalf("Update to %d vCPUs, %d MiB: %v", step.vcpus, step.memMiB, err)
		}
		took := time.Since(start)
		// An offlined vCPU may show in nproc for a moment after the agent
		// returned.
		var n, kib int
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			if n, kib = guest(); n == step.vcpus || time.Now().After(deadline) {
				break
			}
		}
		wantKiB := base + int(step.memMiB-256)<<10
		if n != step.vcpus || kib != wantKiB {
			t.Errorf("after Update to %d vCPUs, %d MiB: the guest has %d vCPUs and %d KiB, want %d KiB", step.vcpus, step.memMiB, n, kib, wantKiB)
		}
		sz, err := v.Size(ctx)
		if err != nil || sz.VCPUs != step.vcpus || sz.MemoryBytes != uint64(step.memMiB)<<20 {
			t.Errorf("Size = %+v, %v; want %d vCPUs, %d MiB", sz, err, step.vcpus, step.memMiB)
		}
		sized := req.Spec
		sized.MemoryBytes = uint64(step.memMiB) << 20
		if want := vm.MemoryLimit(sized, h); qemuLimit() != want {
			t.Errorf("QEMU's memory limit at %d MiB = %d, want %d", step.memMiB, qemuLimit(), want)
		}
		t.Logf("%d vCPUs, %d MiB: %v", step.vcpus, step.memMiB, took.Round(time.Millisecond))
	}

	for _, bad := range []struct {
		vcpus  int
		memMiB int64
		want   string
	}{
		{3, 256, "above vmpod.io/max-vcpus=2"},
		{1, 1024, "above vmpod.io/max-memory=512Mi"},
		{1, 128, "below the 256Mi the VM booted with"},
		{1, 257, "blocks of 2Mi"},
	} {
		err := v.Update(ctx, resources(bad.vcpus, bad.memMiB))
		if !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("Update to %d vCPUs, %d MiB: %v; want FailedPrecondition saying %q", bad.vcpus, bad.memMiB, err, bad.want)
		}
	}
	if n, kib := guest(); n != 1 || kib != base {
		t.Errorf("refused updates changed the guest: %d vCPUs, %d KiB", n, kib)
	}

	// The guest holds memory it got: the shrink gives back what it can.
	// It fills its memory only once its kernel shows all of it: the
	// device reports blocks plugged as the guest asks for them, a moment
	// before the guest has them online.
	if err := v.Update(ctx, resources(1, 512)); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if _, kib := guest(); kib == base+256<<10 {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the guest shows %d KiB 10s after it grew to 512 MiB, want %d", kib, base+256<<10)
		}
	}
	// All the guest has available but 160 MiB: it can spare 96 MiB of
	// them and keep the 64 MiB vmpod leaves it (a guest asked for more
	// than it can spare kills its processes and panics: "System is
	// deadlocked on memory", seen under load before vmpod asked less).
	r, err := v.Exec(ctx, vm.ExecRequest{Args: []string{"sed", "-n", `s/^MemAvailable: *\([0-9]*\) kB/\1/p`, "/proc/meminfo"}})
	if err != nil {
		t.Fatal(err)
	}
	avail, err := strconv.Atoi(strings.TrimSpace(string(r.Stdout)))
	if err != nil || avail>>10 < 160+32 {
		t.Fatalf("the guest has %q KiB available at 512 MiB; want more than 192 MiB", r.Stdout)
	}
	fill := avail>>10 - 160
	t.Logf("the guest fills %d MiB of its %d MiB available", fill, avail>>10)
	hold, err := v.Exec(ctx, vm.ExecRequest{Args: []string{"sh", "-c",
		fmt.Sprintf(`mkdir -p /hold && mount -t tmpfs -o size=400m tmpfs /hold && dd if=/dev/zero of=/hold/f bs=1M count=%d 2>&1 | tail -1`, fill)}})
	if err != nil || hold.ExitCode != 0 {
		t.Fatalf("filling the guest's memory: %v %+v", err, hold)
	}
	err = v.Update(ctx, resources(1, 256))
	if !errdefs.IsUnavailable(err) || !strings.Contains(err.Error(), "gave back only part of it") {
		console, _ := os.ReadFile(req.Layout.ConsoleLog())
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		exit, werr := v.Wait(wctx)
		cancel()
		t.Fatalf("a shrink the guest cannot give: %v; want Unavailable saying what it kept; the VM's exit: %+v %v; the console's end:\n%s",
			err, exit, werr, console[max(0, len(console)-4096):])
	}
	t.Logf("refused shrink: %v", err)
	sz, err := v.Size(ctx)
	if err != nil {
		t.Fatal(err)
	}
	held := req.Spec
	held.MemoryBytes = sz.MemoryBytes
	if sz.MemoryBytes <= 256<<20 || sz.MemoryBytes >= 512<<20 || qemuLimit() < vm.MemoryLimit(held, h) {
		t.Errorf("after a partial shrink the guest has %d MiB and QEMU's limit is %d: want part given back, and the limit to cover the rest", sz.MemoryBytes>>20, qemuLimit())
	}
	if _, err := v.Exec(ctx, vm.ExecRequest{Args: []string{"true"}}); err != nil {
		t.Errorf("the guest does not answer after the refused shrink: %v", err)
	}
}

// startResizable starts the test guest with room for 2 vCPUs and 512 MiB
// (testdata/resizable-pod.yaml) and waits until it is ready.
func startResizable(ctx context.Context, t testing.TB) (*vm.VM, vm.Request, host.Host) {
	t.Helper()
	return startPod(ctx, t, "resizable-pod.yaml")
}

// startPod starts the test guest as podFile asks and waits until it is
// ready.
func startPod(ctx context.Context, t testing.TB, podFile string) (*vm.VM, vm.Request, host.Host) {
	t.Helper()
	rt, h, root := runtimeForTest(t)
	dir, err := os.MkdirTemp(root, "pod-")
	if err != nil {
		t.Fatal(err)
	}
	var rec records
	req := lifecycleRequest(t, podFile, "resize", dir, &rec)
	req.Jail = jailForTest(t, root, dir)
	v, err := vm.Create(ctx, req, func(context.Context) (vm.Env, error) { return vm.Env{Runtime: rt, Host: h}, nil })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = v.Delete(context.Background()) })
	if _, err := v.Start(ctx); err != nil {
		t.Fatal(err)
	}
	watchConsole(t, req.Layout.ConsoleLog()).waitFor(ctx, t, "VMPOD-GUEST: ready")
	return v, req, h
}

// resources are a container's CPU limit of vcpus and memory limit of
// memMiB, as the front doors pass them.
func resources(vcpus int, memMiB int64) *specs.LinuxResources {
	quota, period, limit := int64(vcpus)*100000, uint64(100000), memMiB<<20
	return &specs.LinuxResources{CPU: &specs.LinuxCPU{Quota: &quota, Period: &period}, Memory: &specs.LinuxMemory{Limit: &limit}}
}

// BenchmarkResize: how long a live resize of the test guest takes, from
// Update to the guest having the new size (Update returns only then):
// a vCPU brought online and taken offline again, and 256 MiB plugged and
// unplugged, under whatever accelerator the node has.
func BenchmarkResize(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	v, _, _ := startResizable(ctx, b)
	var steps = []struct {
		name   string
		vcpus  int
		memMiB int64
	}{{"vcpu-up", 2, 256}, {"vcpu-down", 1, 256}, {"mem-up", 1, 512}, {"mem-down", 1, 256}}
	took := make([]time.Duration, len(steps))
	b.ResetTimer()
	for range b.N {
		for i, s := range steps {
			start := time.Now()
			if err := v.Update(ctx, resources(s.vcpus, s.memMiB)); err != nil {
				b.Fatalf("%s: %v", s.name, err)
			}
			took[i] += time.Since(start)
		}
	}
	b.StopTimer()
	for i, s := range steps {
		b.ReportMetric(float64(took[i].Milliseconds())/float64(b.N), s.name+"-ms")
	}
}

// TestVMDefaultRoom: a pod that sets no vmpod.io/max-vcpus gets the
// node's default room (Request.DefaultMaxVCPUs, as far as the node's
// CPUs go): its guest boots with the pod's one vCPU and takes a second
// live; a process that adopts the VM finds the room in its domain and
// takes the vCPU back; beyond the room is refused, naming it.
func TestVMDefaultRoom(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	req, rec, open := bootRequest(t, "room")
	open = atLeastCPUs(open, 2)
	req.DefaultMaxVCPUs = 2
	if req.Spec.MaxVCPUs != 0 || req.Spec.VCPUs != 1 {
		t.Fatalf("boot-pod.yaml has %d vCPUs, maximum %d; want 1 and none", req.Spec.VCPUs, req.Spec.MaxVCPUs)
	}
	v, err := vm.Create(ctx, req, open)
	if err != nil {
		t.Fatal(err)
	}
	current := v
	t.Cleanup(func() { _ = current.Delete(context.Background()) })
	if _, err := v.Start(ctx); err != nil {
		t.Fatal(err)
	}
	watchConsole(t, req.Layout.ConsoleLog()).waitFor(ctx, t, "VMPOD-GUEST: ready")

	nproc := func(v *vm.VM, want int) {
		t.Helper()
		var got string
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			r, err := v.Exec(ctx, vm.ExecRequest{Args: []string{"nproc"}})
			if err != nil {
				t.Fatal(err)
			}
			if got = strings.TrimSpace(string(r.Stdout)); got == strconv.Itoa(want) || time.Now().After(deadline) {
				break
			}
		}
		if got != strconv.Itoa(want) {
			t.Errorf("the guest's nproc says %s, want %d", got, want)
		}
		if sz, err := v.Size(ctx); err != nil || sz.VCPUs != want {
			t.Errorf("Size = %+v, %v; want %d vCPUs", sz, err, want)
		}
	}
	nproc(v, 1)
	start := time.Now()
	if err := v.Update(ctx, resources(2, 256)); err != nil {
		t.Fatalf("1 -> 2 vCPUs in the default room: %v", err)
	}
	t.Logf("1 -> 2 vCPUs: %v", time.Since(start).Round(time.Millisecond))
	nproc(v, 2)

	v.Abandon()
	adopted, err := vm.Adopt(ctx, vm.AdoptRequest{Spec: req.Spec, Layout: req.Layout, Held: rec.last(), Record: rec.record}, open)
	if err != nil {
		t.Fatal(err)
	}
	current = adopted
	nproc(adopted, 2)
	if err := adopted.Update(ctx, resources(1, 256)); err != nil {
		t.Fatalf("2 -> 1 vCPUs after adoption: %v", err)
	}
	nproc(adopted, 1)
	err = adopted.Update(ctx, resources(3, 256))
	if !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "above 2, the most vCPUs this VM can have") ||
		!strings.Contains(err.Error(), "the node's default room") {
		t.Errorf("3 vCPUs in a default room of 2: %v; want FailedPrecondition naming the room", err)
	}

	// The pod did not ask for the room, so its guest may have no agent:
	// a CPU limit of the same whole CPUs, or a lower one, still changes
	// the quota; more vCPUs are refused, naming the agent.
	// The exec that kills the agent loses its own answer with it.
	_, _ = adopted.Exec(ctx, vm.ExecRequest{Args: []string{"sh", "-c", `kill $(pidof qemu-ga)`}})
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		if _, err := adopted.Exec(ctx, vm.ExecRequest{Args: []string{"true"}}); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the guest agent still answers 30s after it was killed")
		}
	}
	half, period := int64(50000), uint64(100000)
	if err := adopted.Update(ctx, &specs.LinuxResources{CPU: &specs.LinuxCPU{Quota: &half, Period: &period}}); err != nil {
		t.Errorf("half a CPU without the guest agent: %v; want the quota changed", err)
	}
	if err := adopted.Update(ctx, resources(2, 256)); !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "guest agent") {
		t.Errorf("2 vCPUs without the guest agent: %v; want FailedPrecondition naming the agent", err)
	}
}

// BenchmarkDefaultRoom: what the node's default room in vCPUs costs the
// test guest (1 vCPU, 256 MiB), a pod that sets no vmpod.io/max-vcpus,
// against the same VM without room, under whatever accelerator the node
// has; and what using it takes:
//
//   - boot-ms, boot-room-ms: a cold boot, Create to the guest agent
//     answering;
//   - rss-MiB, rss-room-MiB: QEMU's resident memory then;
//   - loop-ms, loop-room-ms: a shell loop of 50,000 rounds in the guest,
//     through the agent (under TCG, QEMU translates the code of a VM
//     that may have more than one vCPU for parallel vCPUs);
//   - vcpu-up-ms: Update from 1 to 2 vCPUs in the room, to the guest
//     having the second online.
func BenchmarkDefaultRoom(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	var boot, bootRoom, loop, loopRoom, up time.Duration
	var rss, rssRoom float64
	b.ResetTimer()
	for i := range b.N {
		for _, room := range []int{0, 2} {
			start := time.Now()
			req, _, open := bootRequest(b, fmt.Sprintf("bench-room%d-%d", room, i))
			req.DefaultMaxVCPUs = room
			v, err := vm.Create(ctx, req, atLeastCPUs(open, 2))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = v.Delete(context.Background()) })
			pid, err := v.Start(ctx)
			if err != nil {
				b.Fatal(err)
			}
			waitAgent(ctx, b, v)
			took, mib := time.Since(start), residentMiB(b, pid)
			start = time.Now()
			if r, err := v.Exec(ctx, vm.ExecRequest{Args: []string{"sh", "-c", `i=0; while [ $i -lt 50000 ]; do i=$((i+1)); done`}}); err != nil || r.ExitCode != 0 {
				b.Fatalf("the loop in the guest: %v %+v", err, r)
			}
			looped := time.Since(start)
			if room == 0 {
				boot, rss, loop = boot+took, rss+mib, loop+looped
			} else {
				bootRoom, rssRoom, loopRoom = bootRoom+took, rssRoom+mib, loopRoom+looped
				start = time.Now()
				if err := v.Update(ctx, resources(2, 256)); err != nil {
					b.Fatal(err)
				}
				up += time.Since(start)
			}
			if err := v.Delete(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(float64(boot.Milliseconds())/n, "boot-ms")
	b.ReportMetric(float64(bootRoom.Milliseconds())/n, "boot-room-ms")
	b.ReportMetric(rss/n, "rss-MiB")
	b.ReportMetric(rssRoom/n, "rss-room-MiB")
	b.ReportMetric(float64(loop.Milliseconds())/n, "loop-ms")
	b.ReportMetric(float64(loopRoom.Milliseconds())/n, "loop-room-ms")
	b.ReportMetric(float64(up.Milliseconds())/n, "vcpu-up-ms")
}

// atLeastCPUs is open on a node of at least n CPUs, whatever the machine
// has: the default room stops at the node's CPUs, and QEMU runs more
// vCPUs than there are CPUs, so a test of the room runs on a 1-CPU
// machine too.
func atLeastCPUs(open vm.Opener, n int) vm.Opener {
	return func(ctx context.Context) (vm.Env, error) {
		env, err := open(ctx)
		env.Host.CPUs = max(env.Host.CPUs, n)
		return env, err
	}
}

// residentMiB is process pid's resident memory (VmRSS), in MiB.
func residentMiB(t testing.TB, pid int) float64 {
	t.Helper()
	kv, err := procmem.KeyValues(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil || kv["VmRSS"] == 0 {
		t.Fatalf("VmRSS of %d: %v", pid, err)
	}
	return float64(kv["VmRSS"]) / (1 << 20)
}
