package vm_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/vmpod/vmpod/pkg/podcgroup"
	"github.com/vmpod/vmpod/pkg/vm"
)

// TestVMResizeDIMM resizes the running test guest's memory in DIMMs
// (vmpod.io/memory-hotplug: dimm) through VM.Update: 256 -> 512 -> 256
// MiB, with no restart. The guest's MemTotal follows each plug; a size
// between whole DIMMs is refused and names the DIMM; a checkpoint with
// DIMMs plugged is refused, one at the boot size is not; the shrink
// gives back what the guest lets go. A guest holding the memory (a
// tmpfs) keeps its DIMMs, reported, with QEMU's limit covering them, and
// gives them back on the retry once it let go.
func TestVMResizeDIMM(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	v, req, h := startPod(ctx, t, "resizable-dimm-pod.yaml")
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(req.Layout.ConsoleLog())
			t.Logf("console, last 4000 bytes:\n%s", b[max(0, len(b)-4000):])
		}
	})

	memTotal := func() int {
		t.Helper()
		r, err := v.Exec(ctx, vm.ExecRequest{Args: []string{"sed", "-n", `s/^MemTotal: *\([0-9]*\) kB/\1/p`, "/proc/meminfo"}})
		if err != nil {
			t.Fatal(err)
		}
		kib, err := strconv.Atoi(strings.TrimSpace(string(r.Stdout)))
		if err != nil {
			t.Fatalf("guest said %q", r.Stdout)
		}
		return kib
	}
	// waitMemTotal polls the guest until its MemTotal is kib, and says
	// how long that took.
	waitMemTotal := func(kib int) (int, time.Duration) {
		t.Helper()
		start := time.Now()
		got := memTotal()
		for deadline := start.Add(20 * time.Second); got != kib && time.Now().Before(deadline); got = memTotal() {
			time.Sleep(100 * time.Millisecond)
		}
		return got, time.Since(start)
	}
	qemuLimit := func() uint64 { return podcgroup.MemoryLimit(req.Cgroup.Dir) }
	held := func(bytes uint64) uint64 {
		s := req.Spec
		s.MemoryBytes = bytes
		return vm.MemoryLimit(s, h)
	}
	bootID := func() string {
		t.Helper()
		r, err := v.Exec(ctx, vm.ExecRequest{Args: []string{"cat", "/proc/sys/kernel/random/boot_id"}})
		if err != nil {
			t.Fatal(err)
		}
		return string(r.Stdout)
	}
	boot := bootID()
	base := memTotal()

	start := time.Now()
	if err := v.Update(ctx, resources(1, 512)); err != nil {
		t.Fatalf("Update to 512 MiB: %v", err)
	}
	took := time.Since(start)
	kib, seen := waitMemTotal(base + 256<<10)
	if kib != base+256<<10 {
		t.Fatalf("after Update to 512 MiB the guest has MemTotal %d KiB, want %d", kib, base+256<<10)
	}
	t.Logf("256 -> 512 MiB in 2 DIMMs: Update %v, guest MemTotal %v after it", took.Round(time.Millisecond), seen.Round(time.Millisecond))
	if sz, err := v.Size(ctx); err != nil || sz.MemoryBytes != 512<<20 {
		t.Errorf("Size = %+v, %v; want 512 MiB", sz, err)
	}
	if got, want := qemuLimit(), held(512<<20); got != want {
		t.Errorf("QEMU's memory limit at 512 MiB = %d, want %d", got, want)
	}

	err := v.Update(ctx, resources(1, 320))
	if !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "whole DIMMs of 128Mi") {
		t.Errorf("Update to 320 MiB: %v; want FailedPrecondition naming the 128Mi DIMM", err)
	}
	_, err = v.Checkpoint(ctx, t.TempDir())
	if !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "DIMMs plugged live") {
		t.Errorf("Checkpoint with DIMMs plugged: %v; want FailedPrecondition naming the DIMMs", err)
	}

	start = time.Now()
	err = v.Update(ctx, resources(1, 256))
	took = time.Since(start)
	sz, serr := v.Size(ctx)
	if serr != nil {
		t.Fatal(serr)
	}
	want := base - int(512<<20-sz.MemoryBytes)>>10 + 256<<10
	kib, seen = waitMemTotal(want)
	switch {
	case err == nil && sz.MemoryBytes != 256<<20:
		t.Errorf("Update to 256 MiB returned nil with %d MiB plugged", sz.MemoryBytes>>20)
	case err != nil && (!errdefs.IsUnavailable(err) || !strings.Contains(err.Error(), "gave back only part of it")):
		t.Errorf("Update to 256 MiB: %v; want nil, or Unavailable saying what the guest kept", err)
	case err != nil:
		t.Logf("the guest kept %d MiB: %v", sz.MemoryBytes>>20-256, err)
	}
	if kib != want {
		t.Errorf("after the shrink the guest has %d MiB plugged and MemTotal %d KiB, want %d", sz.MemoryBytes>>20, kib, want)
	}
	if got := qemuLimit(); got != held(sz.MemoryBytes) {
		t.Errorf("QEMU's memory limit with %d MiB held = %d, want %d", sz.MemoryBytes>>20, got, held(sz.MemoryBytes))
	}
	t.Logf("512 -> 256 MiB: Update %v (%d MiB held), guest MemTotal %v after it", took.Round(time.Millisecond), sz.MemoryBytes>>20, seen.Round(time.Millisecond))
	// The guest holds memory it got: a shrink takes the DIMMs it can
	// empty and reports the rest; once the guest lets go, the kubelet's
	// retry takes them.
	if err := v.Update(ctx, resources(1, 512)); err != nil {
		t.Fatal(err)
	}
	hold, err := v.Exec(ctx, vm.ExecRequest{Args: []string{"sh", "-c",
		`mkdir -p /hold && mount -t tmpfs -o size=400m tmpfs /hold && dd if=/dev/zero of=/hold/f bs=1M count=300 2>&1 | tail -1`}})
	if err != nil || hold.ExitCode != 0 {
		t.Fatalf("filling the guest's memory: %v %+v", err, hold)
	}
	start = time.Now()
	err = v.Update(ctx, resources(1, 256))
	took = time.Since(start)
	if !errdefs.IsUnavailable(err) || !strings.Contains(err.Error(), "gave back only part of it") {
		t.Fatalf("a shrink the guest cannot give: %v; want Unavailable saying what it kept", err)
	}
	if sz, serr = v.Size(ctx); serr != nil {
		t.Fatal(serr)
	}
	t.Logf("refused shrink after %v, %d MiB held: %v", took.Round(time.Millisecond), sz.MemoryBytes>>20, err)
	if sz.MemoryBytes <= 256<<20 || qemuLimit() < held(sz.MemoryBytes) {
		t.Errorf("after a partial shrink the guest has %d MiB and QEMU's limit is %d: want the limit to cover it", sz.MemoryBytes>>20, qemuLimit())
	}
	if rm, err := v.Exec(ctx, vm.ExecRequest{Args: []string{"sh", "-c", "rm /hold/f && umount /hold"}}); err != nil || rm.ExitCode != 0 {
		t.Fatalf("freeing the guest's memory: %v %+v", err, rm)
	}
	start = time.Now()
	if err := v.Update(ctx, resources(1, 256)); err != nil {
		t.Errorf("the retried shrink once the guest let go: %v", err)
	}
	t.Logf("retried shrink: %v", time.Since(start).Round(time.Millisecond))
	if kib, _ := waitMemTotal(base); kib != base {
		t.Errorf("after the retried shrink the guest has MemTotal %d KiB, want %d", kib, base)
	}
	if got := qemuLimit(); got != held(256<<20) {
		t.Errorf("QEMU's memory limit at 256 MiB = %d, want %d", got, held(256<<20))
	}
	// At its boot size a DIMM VM checkpoints as any other.
	if _, err := v.Checkpoint(ctx, t.TempDir()); err != nil {
		t.Errorf("Checkpoint at the boot size: %v", err)
	}
	if got := bootID(); got != boot {
		t.Errorf("the guest rebooted during the resizes: boot id %q, was %q", got, boot)
	}
}
