package vmd

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/vmpod/vmpod/internal/ckpt"
	"github.com/vmpod/vmpod/pkg/jail"
	"github.com/vmpod/vmpod/pkg/vm"
)

// TestRecover: a VM that was created but never started is recorded
// stopped with RuntimeRestarted (it held nothing yet, so no hypervisor is
// opened for it), and a process left running as its pod's QEMU uid is
// killed; a stopped one keeps its exit; a bad checkpoint is skipped; Wait
// answers at once for each, and Remove forgets them, checkpoint and all.
func TestRecover(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	cfg := Config{StateRoot: root, UIDs: jail.Range{First: 0x70000000 + 4500, Count: 4}}.WithDefaults()
	created := Record{ID: "created", PodID: "p1", State: Created, CreatedAt: 1}
	stopped := Record{ID: "stopped", PodID: "p2", State: Stopped, CreatedAt: 1, StartedAt: 2, FinishedAt: 3,
		Exit: Exit{Status: 0, Reason: "Completed", Message: "the guest powered off"}}
	for _, r := range []Record{created, stopped} {
		if err := ckpt.Write(cfg.checkpoint(r.ID), checkpointVersion, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(cfg.checkpointDir(), "torn.json"), []byte(`{"version":1,"rec`), 0o600); err != nil {
		t.Fatal(err)
	}

	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// An orphan of the created VM's pod: a process of its QEMU's uid
	// that no hypervisor knows.
	j, err := vm.LeaseJail(root, cfg.UIDs, s.Layout("p1"), cfg.DiskCap)
	if err != nil {
		t.Fatal(err)
	}
	orphan := exec.Command("sleep", "300")
	orphan.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: j.UID, Gid: j.GID}}
	if err := orphan.Start(); err != nil {
		t.Fatal(err)
	}
	reaped := make(chan error, 1)
	go func() { reaped <- orphan.Wait() }()
	t.Cleanup(func() { orphan.Process.Kill() })

	s.Recover(ctx, nil)
	if s.conn != nil {
		t.Error("Recover opened libvirt for VMs that held no domain")
	}
	select {
	case err := <-reaped:
		if ws, ok := orphan.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
			t.Errorf("the orphan of uid %d ended with %v, want SIGKILL", j.UID, err)
		}
	case <-time.After(5 * time.Second):
		t.Errorf("Recover left process %d running as the pod's QEMU uid %d", orphan.Process.Pid, j.UID)
	}
	if got := len(s.List()); got != 2 {
		t.Fatalf("after Recover: %d VMs, want 2: %+v", got, s.List())
	}

	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	exit, err := s.Wait(wctx, "created")
	if err != nil {
		t.Fatal(err)
	}
	if exit.Status != 137 || exit.Reason != "RuntimeRestarted" {
		t.Errorf("a created VM after a restart: exit %+v, want 137 RuntimeRestarted", exit)
	}
	exit, err = s.Wait(wctx, "stopped")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(stopped.Exit, exit); diff != "" {
		t.Errorf("a stopped VM's exit after a restart (-want +got):\n%s", diff)
	}
	onDisk, err := ckpt.Read[Record](cfg.checkpoint("created"), checkpointVersion)
	if err != nil || onDisk.State != Stopped || onDisk.Exit.Reason != "RuntimeRestarted" {
		t.Errorf("the created VM's checkpoint: %+v, %v; want it stopped, RuntimeRestarted", onDisk, err)
	}

	for _, id := range []string{"created", "stopped"} {
		if err := s.Remove(ctx, id); err != nil {
			t.Errorf("Remove %s: %v", id, err)
		}
		if _, err := os.Stat(cfg.checkpoint(id)); !os.IsNotExist(err) {
			t.Errorf("Remove %s left its checkpoint: %v", id, err)
		}
	}
	if err := s.Remove(ctx, "created"); !errdefs.IsNotFound(err) {
		t.Errorf("Remove of a removed VM: %v, want NotFound", err)
	}
}

// TestRefusals: a VM without an id or pod is InvalidArgument, and every
// call on an id the node does not have is NotFound, before any
// hypervisor is opened.
func TestRefusals(t *testing.T) {
	ctx := context.Background()
	s, err := New(Config{StateRoot: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Create(ctx, CreateRequest{PodID: "p"}); !errdefs.IsInvalidArgument(err) {
		t.Errorf("Create without an id: %v, want InvalidArgument", err)
	}
	if err := s.Create(ctx, CreateRequest{ID: "x"}); !errdefs.IsInvalidArgument(err) {
		t.Errorf("Create without a pod: %v, want InvalidArgument", err)
	}
	for name, call := range map[string]func() error{
		"Start":    func() error { _, err := s.Start(ctx, "absent"); return err },
		"Stop":     func() error { return s.Stop(ctx, "absent", time.Second) },
		"Kill":     func() error { return s.Kill(ctx, "absent", Exit{}) },
		"Shutdown": func() error { return s.Shutdown(ctx, "absent") },
		"Exec":     func() error { _, err := s.Exec(ctx, "absent", vmExec("true")); return err },
		"Wait":     func() error { _, err := s.Wait(ctx, "absent"); return err },
		"Stats":    func() error { _, _, err := s.Stats("absent"); return err },
		"Remove":   func() error { return s.Remove(ctx, "absent") },
		"Get":      func() error { _, err := s.Get("absent"); return err },
	} {
		if err := call(); !errdefs.IsNotFound(err) {
			t.Errorf("%s of an absent VM: %v, want NotFound", name, err)
		}
	}
	if s.conn != nil {
		t.Error("refusals opened libvirt")
	}
}

// TestWaitPredecessor: a VM of a pod whose earlier VM still holds the
// pod's domain (its shim died; containerd is still removing it while the
// kubelet makes the pod again) waits for it to go, and is Unavailable,
// naming it, if it does not go within the wait. A stopped earlier VM
// holds no domain and is no wait.
func TestWaitPredecessor(t *testing.T) {
	ctx := context.Background()
	s, err := New(Config{StateRoot: t.TempDir()}.WithDefaults())
	if err != nil {
		t.Fatal(err)
	}
	defer func(d time.Duration) { predecessorWait = d }(predecessorWait)
	predecessorWait = 300 * time.Millisecond
	old := newInstance(s.cfg, Record{ID: "old", PodID: "p1", State: Running, Held: vm.Held{Domain: "ns_pod"}})
	gone := newInstance(s.cfg, Record{ID: "gone", PodID: "p0", State: Stopped})
	s.mu.Lock()
	s.vms["old"], s.vms["gone"] = old, gone
	s.mu.Unlock()

	if err := s.waitPredecessor(ctx, "new", "other_pod"); err != nil {
		t.Errorf("a VM of another pod waited: %v", err)
	}
	err = s.waitPredecessor(ctx, "new", "ns_pod")
	if !errdefs.IsUnavailable(err) || !strings.Contains(err.Error(), "VM old") {
		t.Errorf("while the earlier VM holds the domain: %v, want Unavailable naming VM old", err)
	}

	predecessorWait = 30 * time.Second
	go func() {
		time.Sleep(200 * time.Millisecond)
		s.forget(old)
	}()
	start := time.Now()
	if err := s.waitPredecessor(ctx, "new", "ns_pod"); err != nil {
		t.Errorf("after the earlier VM went: %v", err)
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Errorf("waited %v, less than the earlier VM took to go", d)
	}
}

// TestReleasePodWaits: a pod's release waits for its VMs to go (after a
// pod's shim died, containerd cleans its sandbox and its containers up at
// once), removes the pod's dir once they have, and is FailedPrecondition,
// naming the VM, if one still holds something past the wait.
func TestReleasePodWaits(t *testing.T) {
	ctx := context.Background()
	s, err := New(Config{StateRoot: t.TempDir()}.WithDefaults())
	if err != nil {
		t.Fatal(err)
	}
	defer func(d time.Duration) { podReleaseWait = d }(podReleaseWait)
	podReleaseWait = 300 * time.Millisecond
	dir := s.Layout("p1").Dir
	if err := os.MkdirAll(filepath.Join(dir, "vm"), 0o700); err != nil {
		t.Fatal(err)
	}
	in := newInstance(s.cfg, Record{ID: "c1", PodID: "p1", State: Running, Held: vm.Held{Domain: "ns_pod"}})
	s.mu.Lock()
	s.vms["c1"] = in
	s.mu.Unlock()

	if err := s.ReleasePod(ctx, "p1"); !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "VM c1") {
		t.Errorf("release while VM c1 holds its domain: %v, want FailedPrecondition naming it", err)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Errorf("the pod's dir went while its VM held it: %v", err)
	}

	podReleaseWait = 30 * time.Second
	go func() {
		time.Sleep(200 * time.Millisecond)
		s.forget(in)
	}()
	if err := s.ReleasePod(ctx, "p1"); err != nil {
		t.Errorf("release once the VM went: %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the pod's dir after its release: %v, want it gone", err)
	}
}

// TestReleaseOrphans: after Recover, the stopped VMs of pods nobody
// serves any more are removed and their pods released (dir, uid lease),
// as is a pod's dir with no VM left in it; a served pod keeps its VMs, and
// a running VM is left to its pod even if nobody serves it.
func TestReleaseOrphans(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	cfg := Config{StateRoot: root, UIDs: jail.Range{First: 0x70000000 + 4600, Count: 8}}.WithDefaults()
	const gone, served, bare = "aaaaaaaaaaaaaaaa1111", "bbbbbbbbbbbbbbbb2222", "cccccccccccccccc3333"
	recs := []Record{
		{ID: "gone-sandbox", PodID: gone, State: Stopped, Exit: Exit{Status: 137}},
		{ID: "gone-vm", PodID: gone, State: Stopped, Exit: Exit{Status: 1}},
		{ID: "served-vm", PodID: served, State: Stopped, Exit: Exit{Status: 0}},
	}
	for _, r := range recs {
		if err := ckpt.Write(cfg.checkpoint(r.ID), checkpointVersion, r); err != nil {
			t.Fatal(err)
		}
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, pod := range []string{gone, served, bare} {
		if _, err := vm.LeaseJail(root, cfg.UIDs, s.Layout(pod), cfg.DiskCap); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(s.Layout(pod).Dir, "vm"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	s.Recover(ctx, nil)
	// A running VM nobody serves: left alone.
	running := newInstance(s.cfg, Record{ID: "running", PodID: "dddddddddddddddd4444", State: Running})
	s.mu.Lock()
	s.vms["running"] = running
	s.mu.Unlock()

	// One taken over whose QEMU was gone: recorded stopped by its wait a
	// moment later, as after a reboot, while ReleaseOrphans waits for the
	// running one ("running" comes first: the orphans are taken in the
	// order of their ids).
	const late = "eeeeeeeeeeeeeeee5555"
	stopping := newInstance(s.cfg, Record{ID: "stopping", PodID: late, State: Running})
	s.mu.Lock()
	s.vms["stopping"] = stopping
	s.mu.Unlock()
	go func() {
		time.Sleep(300 * time.Millisecond)
		s.stopped(ctx, stopping, Exit{Status: 1, Reason: "QEMUFailed"})
	}()

	released := s.ReleaseOrphans(ctx, func(id string) bool { return strings.HasPrefix(served, id) })
	want := []string{gone, bare[:16], late}
	if diff := cmp.Diff(want, released, cmpSorted); diff != "" {
		t.Errorf("released pods (-want +got):\n%s", diff)
	}
	var ids []string
	for _, r := range s.List() {
		ids = append(ids, r.ID)
	}
	if diff := cmp.Diff([]string{"running", "served-vm"}, ids, cmpSorted); diff != "" {
		t.Errorf("the VMs left (-want +got):\n%s", diff)
	}
	for pod, kept := range map[string]bool{gone: false, bare: false, served: true} {
		_, err := os.Stat(s.Layout(pod).Dir)
		if kept != (err == nil) {
			t.Errorf("pod %s's dir: %v, want kept %v", pod, err, kept)
		}
	}
	for _, id := range []string{"gone-sandbox", "gone-vm"} {
		if _, err := os.Stat(cfg.checkpoint(id)); !os.IsNotExist(err) {
			t.Errorf("the checkpoint of %s, released: %v", id, err)
		}
	}
	leases, err := os.ReadDir(vm.UIDLeases(root))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, l := range leases {
		if l.Name() != ".lock" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d uid leases left, want the served pod's alone: %v", n, leases)
	}
}

var cmpSorted = cmpopts.SortSlices(func(a, b string) bool { return a < b })
