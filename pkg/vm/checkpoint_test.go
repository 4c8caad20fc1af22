package vm_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/vmpod/vmpod/internal/qcow2"
	"github.com/vmpod/vmpod/internal/testenv/ckptarchive"
	"github.com/vmpod/vmpod/pkg/jail"
	"github.com/vmpod/vmpod/pkg/vm"
)

// startPlain boots the test guest without volumes, jailed, and waits for
// it to be ready.
func startPlain(ctx context.Context, t testing.TB, name string, edit func(*vm.Request)) (*vm.VM, vm.Request) {
	t.Helper()
	v, req, err := newVM(ctx, t, name, edit)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Start(ctx); err != nil {
		t.Fatal(err)
	}
	watchConsole(t, req.Layout.ConsoleLog()).waitFor(ctx, t, "VMPOD-GUEST: ready")
	return v, req
}

// guestSh runs a shell script in the guest and returns its output.
func guestSh(ctx context.Context, t testing.TB, v *vm.VM, script string) string {
	t.Helper()
	r, err := v.Exec(ctx, vm.ExecRequest{Args: []string{"sh", "-c", script}})
	if err != nil {
		t.Fatalf("guest %q: %v", script, err)
	}
	if r.ExitCode != 0 {
		t.Fatalf("guest %q: exit %d: %s%s", script, r.ExitCode, r.Stdout, r.Stderr)
	}
	return strings.TrimSpace(string(r.Stdout))
}

// startCounter starts a counter in the guest that counts every 100 ms
// into /run/counter (readCounter).
func startCounter(ctx context.Context, t testing.TB, v *vm.VM) {
	guestSh(ctx, t, v, ckptarchive.CounterScript)
}

// readCounter reads the counter startCounter runs in a guest.
func readCounter(ctx context.Context, t testing.TB, v *vm.VM) int {
	t.Helper()
	n, err := strconv.Atoi(guestSh(ctx, t, v, `cat /run/counter`))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestVMCheckpoint checkpoints the running test guest and lets it run on:
// the same QEMU, the guest's counter going on, its disk taking writes
// again on its own overlay (the top layer merged back and gone); the
// checkpoint holds the memory (a state file libvirt reads back with the
// domain's definition), the disk overlay as it was (over the image's
// disk) and a manifest whose sums match the files. A second checkpoint
// into a used dir and one of a stopped VM are refused, leaving nothing.
func TestVMCheckpoint(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	v, req := startPlain(ctx, t, "checkpoint", nil)
	l := req.Layout
	guestSh(ctx, t, v, `echo before > /mnt/before && sync`)
	startCounter(ctx, t, v)
	counter := func() int { return readCounter(ctx, t, v) }
	info, err := v.PID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before := counter()

	dir := t.TempDir()
	res, err := v.Checkpoint(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("checkpoint: guest paused %v, whole call %v", res.Paused.Round(time.Millisecond), res.Total.Round(time.Millisecond))

	// The VM runs on, in the same QEMU.
	if now, err := v.PID(ctx); err != nil || now != info {
		t.Errorf("QEMU pid after the checkpoint %d (%v), want %d: the same process", now, err, info)
	}
	deadline := time.Now().Add(30 * time.Second)
	for counter() <= before+5 {
		if time.Now().After(deadline) {
			t.Fatalf("the guest's counter stays near %d after the checkpoint", before)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if got := guestSh(ctx, t, v, `echo after > /mnt/after && sync && cat /mnt/before /mnt/after`); got != "before\nafter" {
		t.Errorf("the guest's disk after the checkpoint reads %q", got)
	}
	for _, f := range []string{l.TopLayer(), l.CheckpointMark()} {
		if _, err := os.Lstat(f); !os.IsNotExist(err) {
			t.Errorf("the checkpoint's %s is still in the VM dir: %v", filepath.Base(f), err)
		}
	}

	// What the checkpoint holds.
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "disk.qcow2 vm.state vmpod.json" {
		t.Fatalf("checkpoint dir holds %v, want disk.qcow2 vm.state vmpod.json", names)
	}
	m := readManifest(t, dir)
	if m.Version != vm.ManifestVersion || m.Domain != req.Spec.Name || m.VCPUs != 1 || m.MemoryBytes != 256<<20 || m.Spec.Name != req.Spec.Name {
		t.Errorf("manifest %+v", m)
	}
	// The versioned type the spec's q35 resolved to.
	if !strings.HasPrefix(m.Machine, "pc-q35-") {
		t.Errorf("manifest machine %q, want a versioned q35 (pc-q35-*)", m.Machine)
	}
	for _, f := range []string{vm.CheckpointState, vm.CheckpointDisk} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		if got := m.Files[f]; got.Bytes != int64(len(b)) || got.SHA256 != hex.EncodeToString(sum[:]) {
			t.Errorf("manifest says %s is %+v; it has %d bytes, sha256 %x", f, got, len(b), sum)
		}
		t.Logf("%s: %d bytes", f, len(b))
	}
	saved, err := shared.conn.SavedDefinition(ctx, filepath.Join(dir, vm.CheckpointState))
	if err != nil || !strings.Contains(saved, "<name>"+req.Spec.Name+"</name>") {
		t.Errorf("the state file's definition: %v\n%s", err, saved)
	}
	f, err := os.Open(filepath.Join(dir, vm.CheckpointDisk))
	if err != nil {
		t.Fatal(err)
	}
	h, err := qcow2.ReadHeader(f)
	f.Close()
	if err != nil || h.BackingFileSize == 0 {
		t.Errorf("the checkpoint's disk is not an overlay: %+v, %v", h, err)
	}

	// Refused: a used dir; a stopped VM. Nothing is left in a fresh dir.
	if _, err := v.Checkpoint(ctx, dir); !errdefs.IsInvalidArgument(err) {
		t.Errorf("a checkpoint into a used dir: %v, want InvalidArgument", err)
	}
	if err := v.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	fresh := t.TempDir()
	if _, err := v.Checkpoint(ctx, fresh); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("a checkpoint of a stopped VM: %v, want FailedPrecondition", err)
	}
	if e, _ := os.ReadDir(fresh); len(e) != 0 {
		t.Errorf("a refused checkpoint left %v", e)
	}
}

// newVM creates (not starts) a VM of the test guest in a fresh pod dir;
// edit changes its request first.
func newVM(ctx context.Context, t testing.TB, name string, edit func(*vm.Request)) (*vm.VM, vm.Request, error) {
	t.Helper()
	req, _, open := bootRequest(t, name)
	if edit != nil {
		edit(&req)
	}
	v, err := vm.Create(ctx, req, open)
	if err == nil {
		t.Cleanup(func() { _ = v.Delete(context.Background()) })
	}
	return v, req, err
}

// copyDir copies the flat checkpoint dir src to a new temp dir.
func copyDir(t testing.TB, src string) string {
	t.Helper()
	dst := t.TempDir()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// resum rewrites a checkpoint's manifest with its files' sums as they
// are now: a checkpoint whose damage the sums do not catch.
// readManifest reads the manifest of the checkpoint in dir.
func readManifest(t testing.TB, dir string) vm.Manifest {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, vm.CheckpointManifest))
	if err != nil {
		t.Fatal(err)
	}
	var m vm.Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// editManifest changes the manifest of the checkpoint in dir.
func editManifest(t testing.TB, dir string, edit func(*vm.Manifest)) {
	t.Helper()
	m := readManifest(t, dir)
	edit(&m)
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, vm.CheckpointManifest), data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func resum(t testing.TB, dir string) {
	t.Helper()
	p := filepath.Join(dir, vm.CheckpointManifest)
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var m vm.Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	for f := range m.Files {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		m.Files[f] = vm.FileSum{Bytes: int64(len(b)), SHA256: hex.EncodeToString(sum[:])}
	}
	if data, err = json.Marshal(m); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// assertNoDomain fails if the hypervisor still has the domain.
func assertNoDomain(ctx context.Context, t testing.TB, name string) {
	t.Helper()
	names, err := shared.conn.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if n == name {
			t.Errorf("domain %s is left behind", name)
		}
	}
}

// TestVMRestore restores a checkpoint of the test guest into a new VM of
// another pod, in another dir, after the first VM is gone: the guest goes
// on where it was (its counter and uptime continue, its disk holds what
// was written before the checkpoint and not what came after), under the
// checkpoint's domain name. Damaged checkpoints and another pod's spec are
// refused, leaving no domain and no files.
func TestVMRestore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// The first VM's emulator is a jailer link of its own, gone before the
	// restore, as another node's is: the state file must not need it.
	otherNode := t.TempDir()
	src, srcReq := startPlain(ctx, t, "restore-src", func(r *vm.Request) {
		link, err := jail.LinkEmulator(otherNode)
		if err != nil {
			t.Fatal(err)
		}
		r.Jail.Jailer = link
	})
	domain := srcReq.Spec.Name
	guestSh(ctx, t, src, `echo before > /mnt/before && sync`)
	startCounter(ctx, t, src)
	counter := func() int { return readCounter(ctx, t, src) }
	uptime := func(v *vm.VM) float64 {
		t.Helper()
		f, err := strconv.ParseFloat(strings.Fields(guestSh(ctx, t, v, `cat /proc/uptime`))[0], 64)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	time.Sleep(time.Second)
	before, upBefore := counter(), uptime(src)
	ck := t.TempDir()
	if _, err := src.Checkpoint(ctx, ck); err != nil {
		t.Fatal(err)
	}
	guestSh(ctx, t, src, `echo after > /mnt/after && sync`)
	if err := src.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(otherNode); err != nil {
		t.Fatal(err)
	}

	// Refused, leaving nothing: a truncated state file, an altered disk,
	// another spec, an unknown file.
	truncated := copyDir(t, ck)
	if err := os.Truncate(filepath.Join(truncated, vm.CheckpointState), 1<<20); err != nil {
		t.Fatal(err)
	}
	stray := copyDir(t, ck)
	// Taken on a machine type this node's QEMU lacks (another version's).
	otherMachine := copyDir(t, ck)
	editManifest(t, otherMachine, func(m *vm.Manifest) { m.Machine = "pc-q35-99.0" })
	if err := os.WriteFile(filepath.Join(stray, "extra"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		from string
		edit func(*vm.Request)
		is   func(error) bool
		want string
	}{
		{"truncated state", truncated, nil, errdefs.IsInvalidArgument, "truncated or altered"},
		{"a stray file", stray, nil, errdefs.IsInvalidArgument, "extra is not in its manifest"},
		{"more memory", ck, func(r *vm.Request) { r.Spec.MemoryBytes = 512 << 20 }, errdefs.IsFailedPrecondition, "memory bytes"},
		{"another machine type", otherMachine, nil, errdefs.IsFailedPrecondition, `vmpod.io/machine: "pc-q35-99.0"`},
	} {
		_, req, err := newVM(ctx, t, "restore-bad", func(r *vm.Request) {
			r.From = c.from
			if c.edit != nil {
				c.edit(r)
			}
		})
		if !c.is(err) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want it to say %q", c.name, err, c.want)
		}
		if _, err := os.Stat(req.Layout.VMDir()); !os.IsNotExist(err) {
			t.Errorf("%s: the VM dir is left: %v", c.name, err)
		}
		assertNoDomain(ctx, t, domain)
	}
	// A truncated state file whose manifest was made to match: libvirt
	// or QEMU refuse it at Start, and the VM goes.
	broken := copyDir(t, ck)
	if err := os.Truncate(filepath.Join(broken, vm.CheckpointState), 40<<20); err != nil {
		t.Fatal(err)
	}
	resum(t, broken)
	bv, _, err := newVM(ctx, t, "restore-broken", func(r *vm.Request) { r.From = broken })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bv.Start(ctx); !errdefs.IsInvalidArgument(err) {
		t.Errorf("restore from a truncated state file: %v, want InvalidArgument", err)
	} else {
		t.Logf("truncated state file: %v", err)
	}
	if err := bv.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	assertNoDomain(ctx, t, domain)

	// The restore, by a pod that names the versioned machine type the
	// checkpoint ran on (as one the scheduler placed by it does).
	machine := readManifest(t, ck).Machine
	v, _, err := newVM(ctx, t, "restore-dst", func(r *vm.Request) {
		r.From = ck
		r.Spec.Machine = machine
	})
	if err != nil {
		t.Fatal(err)
	}
	if v.Spec().Name != domain {
		t.Errorf("the restored VM's domain is %q, want the checkpoint's %q", v.Spec().Name, domain)
	}
	start := time.Now()
	if _, err := v.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitAgent(ctx, t, v)
	t.Logf("restored: Start %v to the agent answering; phases %v", time.Since(start).Round(time.Millisecond), v.Phases())
	// A second pod of the same checkpoint on this node, while the first
	// holds the checkpoint's domain, is restored beside it as a domain
	// of its own name and UUID, from a copy of the state it removes.
	beside, besideReq, err := newVM(ctx, t, "restore-beside", func(r *vm.Request) { r.From = ck })
	if err != nil {
		t.Fatal(err)
	}
	if got, want := beside.Spec().Name, besideReq.Spec.Name; got != want || got == domain {
		t.Errorf("the VM restored beside the first has domain %q; want its own %q", got, want)
	}
	start = time.Now()
	if _, err := beside.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitAgent(ctx, t, beside)
	t.Logf("restored beside: Start %v to the agent answering; phases %v", time.Since(start).Round(time.Millisecond), beside.Phases())
	if _, err := os.Stat(besideReq.Layout.RestoreState()); !os.IsNotExist(err) {
		t.Errorf("the copy of the state stays after the restore: %v", err)
	}
	if ua, ub := qemuUUID(ctx, t, v), qemuUUID(ctx, t, beside); ua == ub {
		t.Errorf("both restored domains have UUID %s", ua)
	}
	for _, w := range []*vm.VM{v, beside} {
		if got := readCounter(ctx, t, w); got < before {
			t.Errorf("%s: the restored guest's counter is at %d, below the %d it had before the checkpoint: it started over", w.Spec().Name, got, before)
		}
		if up := uptime(w); up < upBefore {
			t.Errorf("%s: the restored guest's uptime %.1f s is below the %.1f s before the checkpoint: it booted", w.Spec().Name, up, upBefore)
		}
		first := readCounter(ctx, t, w)
		time.Sleep(time.Second)
		if next := readCounter(ctx, t, w); next <= first {
			t.Errorf("%s: the restored guest's counter stands at %d", w.Spec().Name, next)
		}
		if got := guestSh(ctx, t, w, `cat /mnt/before; ls /mnt`); !strings.Contains(got, "before") || strings.Contains(got, "after") {
			t.Errorf("%s: the restored guest's disk: %q; want what was written before the checkpoint only", w.Spec().Name, got)
		}
	}
	// Each writes to a disk of its own.
	guestSh(ctx, t, v, `echo again > /mnt/again && sync`)
	if got := guestSh(ctx, t, v, `cat /mnt/again`); got != "again" {
		t.Errorf("the restored guest's disk takes no writes: %q", got)
	}
	if got := guestSh(ctx, t, beside, `ls /mnt`); strings.Contains(got, "again") {
		t.Errorf("the guest restored beside sees the other's write: %q", got)
	}
}

// qemuUUID is the UUID v's QEMU was started with (its -uuid), which is
// its domain's.
func qemuUUID(ctx context.Context, t testing.TB, v *vm.VM) string {
	t.Helper()
	pid, err := v.PID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		t.Fatal(err)
	}
	args := strings.Split(string(b), "\x00")
	for i, a := range args {
		if a == "-uuid" && i+1 < len(args) {
			return args[i+1]
		}
	}
	t.Fatalf("QEMU %d has no -uuid: %q", pid, args)
	return ""
}

// waitAgent waits until v's guest agent answers.
func waitAgent(ctx context.Context, t testing.TB, v *vm.VM) {
	t.Helper()
	start := time.Now()
	for {
		err := v.PingAgent(ctx)
		if err == nil {
			return
		}
		if time.Since(start) > time.Minute {
			t.Fatalf("the guest agent of %s does not answer: %v", v.Spec().Name, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// BenchmarkCheckpointRestore: what a checkpoint and a restore of the test
// guest (256 MiB) cost, against its cold boot, under whatever accelerator
// the node has. Each round checkpoints the running VM, removes it, and
// restores the checkpoint into a new VM of another pod dir, which the next
// round checkpoints:
//
//   - boot-ms: a cold boot, Create to the guest agent answering (once);
//   - pause-ms: how long the guest's vCPUs stood still for the checkpoint;
//   - checkpoint-ms: the whole Checkpoint call (the disk copied, the writes
//     made meanwhile merged back);
//   - restore-ms: Create from the checkpoint to the guest agent answering;
//   - beside-ms: the same for a second VM of the checkpoint beside the
//     first (its own copy of the state, under another name and UUID);
//   - state-MB, disk-MB: the checkpoint's memory and disk overlay files.
func BenchmarkCheckpointRestore(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	runtimeForTest(b) // its probe of QEMU is not the boot's
	start := time.Now()
	v, _, err := newVM(ctx, b, "bench-boot", nil)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := v.Start(ctx); err != nil {
		b.Fatal(err)
	}
	waitAgent(ctx, b, v)
	boot := time.Since(start)
	var pause, checkpoint, restore, beside time.Duration
	var state, disk int64
	b.ResetTimer()
	for i := range b.N {
		dir := b.TempDir()
		res, err := v.Checkpoint(ctx, dir)
		if err != nil {
			b.Fatal(err)
		}
		pause += res.Paused
		checkpoint += res.Total
		state += res.Manifest.Files[vm.CheckpointState].Bytes
		disk += res.Manifest.Files[vm.CheckpointDisk].Bytes
		if err := v.Delete(ctx); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if v, _, err = newVM(ctx, b, fmt.Sprintf("bench-restore-%d", i), func(r *vm.Request) { r.From = dir }); err != nil {
			b.Fatal(err)
		}
		if _, err := v.Start(ctx); err != nil {
			b.Fatal(err)
		}
		waitAgent(ctx, b, v)
		restore += time.Since(start)
		// A second pod of the checkpoint beside the first: the state
		// copied under a new name and UUID first.
		start = time.Now()
		w, _, err := newVM(ctx, b, fmt.Sprintf("bench-beside-%d", i), func(r *vm.Request) { r.From = dir })
		if err != nil {
			b.Fatal(err)
		}
		if _, err := w.Start(ctx); err != nil {
			b.Fatal(err)
		}
		waitAgent(ctx, b, w)
		beside += time.Since(start)
		if err := w.Delete(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(float64(boot.Milliseconds()), "boot-ms")
	b.ReportMetric(float64(pause.Milliseconds())/n, "pause-ms")
	b.ReportMetric(float64(checkpoint.Milliseconds())/n, "checkpoint-ms")
	b.ReportMetric(float64(restore.Milliseconds())/n, "restore-ms")
	b.ReportMetric(float64(beside.Milliseconds())/n, "beside-ms")
	b.ReportMetric(float64(state)/n/1e6, "state-MB")
	b.ReportMetric(float64(disk)/n/1e6, "disk-MB")
}

// TestCheckpointCrash: a process killed in the middle of a checkpoint,
// the guest's memory taken and its disk on the top layer, leaves the
// guest paused. The next process takes the VM over (Adopt) and finishes
// the checkpoint: the disk is back on its overlay, with what the guest
// writes from then on in it, the top layer and the mark are gone, the
// guest runs on, and the next checkpoint works.
func TestCheckpointCrash(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	req, rec, open := bootRequest(t, "ckpt-crash")
	first, err := vm.Create(ctx, req, open)
	if err != nil {
		t.Fatal(err)
	}
	current := first
	t.Cleanup(func() { _ = current.Delete(context.Background()) })
	if _, err := first.Start(ctx); err != nil {
		t.Fatal(err)
	}
	watchConsole(t, req.Layout.ConsoleLog()).waitFor(ctx, t, "VMPOD-GUEST: ready")
	startCounter(ctx, t, first)

	if err := first.CrashCheckpoint(ctx, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{req.Layout.TopLayer(), req.Layout.CheckpointMark()} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("after the crash: %v; want the checkpoint's %s there", err, filepath.Base(f))
		}
	}
	first.Abandon()

	adopted, err := vm.Adopt(ctx, vm.AdoptRequest{Spec: req.Spec, Layout: req.Layout, Held: rec.last(), Record: rec.record}, open)
	if err != nil {
		t.Fatal(err)
	}
	current = adopted
	for _, f := range []string{req.Layout.TopLayer(), req.Layout.CheckpointMark()} {
		if _, err := os.Stat(f); !os.IsNotExist(err) {
			t.Errorf("after Adopt %s is still there (%v): the checkpoint was not finished", filepath.Base(f), err)
		}
	}
	// The guest runs: its counter moves.
	c := readCounter(ctx, t, adopted)
	deadline := time.Now().Add(30 * time.Second)
	for readCounter(ctx, t, adopted) <= c+3 {
		if time.Now().After(deadline) {
			t.Fatalf("the adopted guest's counter stays at %d: it is still paused", c)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// What it writes now lands in the overlay, the disk's active file again.
	const marker = "VMPOD-WRITTEN-AFTER-THE-CRASH"
	guestSh(ctx, t, adopted, `dd if=/dev/zero bs=64k count=1 2>/dev/null | tr '\0' x > /mnt/after && echo `+marker+` >> /mnt/after && sync`)
	b, err := os.ReadFile(req.Layout.Overlay())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), marker) {
		t.Errorf("the overlay does not hold what the guest wrote after Adopt: the disk is not back on it")
	}
	if _, err := adopted.Checkpoint(ctx, t.TempDir()); err != nil {
		t.Errorf("a checkpoint after the finished one: %v", err)
	}
}

// bootRequest is the request for a VM of the test guest named name in a
// pod dir of its own on the test runtime, with the records it makes
// (rec.last() is what it holds, for Adopt) and the opener to create and
// adopt it with.
func bootRequest(t testing.TB, name string) (vm.Request, *records, vm.Opener) {
	t.Helper()
	rt, h, root := runtimeForTest(t)
	dir, err := os.MkdirTemp(root, "pod-")
	if err != nil {
		t.Fatal(err)
	}
	rec := &records{}
	req := lifecycleRequest(t, "boot-pod.yaml", name, dir, rec)
	req.Jail = jailForTest(t, root, dir)
	return req, rec, func(context.Context) (vm.Env, error) { return vm.Env{Runtime: rt, Host: h}, nil }
}
