package vm_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/vmpod/vmpod/internal/qcow2"
	"github.com/vmpod/vmpod/pkg/vm"
)

// startPlain boots the test guest without volumes, jailed, and waits for
// it to be ready.
func startPlain(ctx context.Context, t testing.TB, name string) (*vm.VM, vm.Request) {
	t.Helper()
	rt, h, root := runtimeForTest(t)
	dir, err := os.MkdirTemp(root, "pod-")
	if err != nil {
		t.Fatal(err)
	}
	var rec records
	req := lifecycleRequest(t, "boot-pod.yaml", name, dir, &rec)
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
// into /run/counter, and returns a reader of it.
func startCounter(ctx context.Context, t testing.TB, v *vm.VM) func() int {
	guestSh(ctx, t, v, `setsid sh -c 'i=0; while :; do i=$((i+1)); echo $i > /run/counter; sleep 0.1; done' </dev/null >/dev/null 2>&1 &`)
	return func() int {
		t.Helper()
		n, err := strconv.Atoi(guestSh(ctx, t, v, `cat /run/counter`))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
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
	v, req := startPlain(ctx, t, "checkpoint")
	l := req.Layout
	guestSh(ctx, t, v, `echo before > /mnt/before && sync`)
	counter := startCounter(ctx, t, v)
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
	if _, err := os.Lstat(filepath.Join(l.VMDir(), "disk-top.qcow2")); !os.IsNotExist(err) {
		t.Errorf("the checkpoint's top layer is still in the VM dir: %v", err)
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
	data, err := os.ReadFile(filepath.Join(dir, vm.CheckpointManifest))
	if err != nil {
		t.Fatal(err)
	}
	var m vm.Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	if m.Version != vm.ManifestVersion || m.Domain != req.Spec.Name || m.VCPUs != 1 || m.MemoryBytes != 256<<20 || m.Spec.Name != req.Spec.Name {
		t.Errorf("manifest %+v", m)
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
