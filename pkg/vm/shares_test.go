package vm_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/vmpod/vmpod/pkg/host"
	"github.com/vmpod/vmpod/pkg/podcgroup"
	"github.com/vmpod/vmpod/pkg/vm"
	"github.com/vmpod/vmpod/pkg/vmspec"
)

// TestVMShares gives the test guest two volumes by virtio-fs, one
// read-write and one read-only, and follows their file servers from
// Start to Delete: each jailed as the pod's file server uid with the
// file-serving capabilities only, under two seccomp filters, in a
// cgroup beside QEMU's; the guest mounts both, reads and writes through
// them, and is refused a write to the read-only one; a server killed
// ends the VM with an exit naming its volume; nothing is left after
// Delete.
func TestVMShares(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var rec records
	req, open, rt := jailedRequest(t, "shares", &rec)
	dir := req.Layout.Dir
	data, config := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(data, "hello"), []byte("from the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(config, "key"), []byte("value\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	req.Spec.Shares = []vmspec.Share{vmspec.NewShare("/data", false), vmspec.NewShare("/etc/config", true)}
	vmspec.SortShares(req.Spec.Shares)
	req.ShareSources = map[string]string{vmspec.ShareTag("/data"): data, vmspec.ShareTag("/etc/config"): config}

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
	pid, err := v.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	held := rec.last()
	fsCgroup := req.Cgroup.Sibling("fs")
	fsUID := held.FileServers
	if fsUID == 0 || fsUID == req.Jail.UID || held.FileServerCgroup != fsCgroup.Raw || held.FileServerDir != req.Layout.FSDir() {
		t.Errorf("record after Start = %+v, want a file server uid other than QEMU's %d, the cgroup %s and the dir %s",
			held, req.Jail.UID, fsCgroup.Raw, req.Layout.FSDir())
	}
	lease := filepath.Join(req.Jail.Leases, fmt.Sprint(fsUID))
	if owner, err := os.ReadFile(lease); err != nil || string(owner) != req.Layout.FSDir() {
		t.Errorf("the file servers' uid lease %s: %q, %v; want it leased to %s", lease, owner, err, req.Layout.FSDir())
	}

	con := watchConsole(t, req.Layout.ConsoleLog())
	con.waitFor(ctx, t, "VMPOD-GUEST: share /data ok")
	con.waitFor(ctx, t, "VMPOD-GUEST: share /etc/config ok")
	con.waitFor(ctx, t, "VMPOD-GUEST: ready")

	// Each server forks once its sandbox is built: the child serves.
	workers := 0
	for _, p := range processesOf(t, fsUID) {
		st := p.status
		if procStatusField(st, "Seccomp_filters") != "2" {
			continue // the parent that only waits for its worker
		}
		workers++
		id := fmt.Sprint(fsUID)
		for k, want := range map[string]string{"Uid": strings.Repeat(id+"\t", 3) + id, "NoNewPrivs": "1",
			"CapEff": "00000000000000db", "CapBnd": "0000000000000000"} {
			if got := procStatusField(st, k); got != want {
				t.Errorf("file server %d: %s %q, want %q", p.pid, k, got, want)
			}
		}
		if cg := cgroupOfPID(t, p.pid); !strings.HasSuffix(cg, fsCgroup.Dir) {
			t.Errorf("file server %d in cgroup %s, want %s", p.pid, cg, fsCgroup.Dir)
		}
	}
	if workers != 2 {
		t.Errorf("%d file servers serve, want 2 (one per share)", workers)
	}

	sh := func(script string) vm.ExecResult {
		t.Helper()
		res, err := v.Exec(ctx, vm.ExecRequest{Args: []string{"/bin/sh", "-c", script}})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := sh("cat /data/hello /etc/config/key && echo from the guest >/data/new"); res.ExitCode != 0 ||
		string(res.Stdout) != "from the host\nvalue\n" {
		t.Errorf("guest read = %+v (%s), want both files and a write", res, res.Stderr)
	}
	if b, err := os.ReadFile(filepath.Join(data, "new")); err != nil || string(b) != "from the guest\n" {
		t.Errorf("the guest's write reached the host as %q, %v", b, err)
	}
	if res := sh("echo x >/etc/config/other"); res.ExitCode == 0 || !strings.Contains(string(res.Stderr), "Read-only") {
		t.Errorf("a write to the read-only share = %+v (%s), want it refused (read-only file system)", res, res.Stderr)
	}
	if _, err := os.Stat(filepath.Join(config, "other")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the read-only share took a write: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(filepath.Dir(cgroupProcs(fsCgroup)), memoryUsageFile())); err == nil {
		t.Logf("the file servers' cgroup holds %s bytes (2 shares, after the guest's reads and write)", strings.TrimSpace(string(b)))
	}

	// A server that dies takes its VM down, naming its volume: the guest's
	// I/O on the share would hang otherwise.
	for _, p := range processesOf(t, fsUID) {
		if strings.Contains(p.cmdline, "source="+data) && procStatusField(p.status, "Seccomp_filters") != "2" {
			if err := syscall.Kill(p.pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		}
	}
	exit, err := v.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if exit.Status == 0 || exit.Reason != "Error" || !strings.Contains(exit.Message, "/data") {
		t.Errorf("exit after its file server was killed = %+v, want an error naming /data", exit)
	}

	deleted = true
	if err := v.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	if got := rec.last(); !got.Empty() {
		t.Errorf("last record %+v, want nothing held", got)
	}
	if left := processesOf(t, fsUID); len(left) > 0 {
		t.Errorf("file server processes left: %+v", left)
	}
	if _, err := os.Stat(lease); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the file servers' uid lease %s is left: %v", lease, err)
	}
	if _, err := os.Stat(cgroupProcs(fsCgroup)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the file servers' cgroup %s is left: %v", fsCgroup.Dir, err)
	}
	assertGone(t, rt, req.Spec.Name, pid, dir)
}

// TestVMShareRefusesFile: virtio-fs serves dirs; a volume whose host side
// is a file (a subPath naming a file) is refused at Create, naming the
// mount path, with nothing left.
func TestVMShareRefusesFile(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var rec records
	req, open, rt := jailedRequest(t, "sharefile", &rec)
	file := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	req.Spec.Shares = []vmspec.Share{vmspec.NewShare("/etc/app.conf", true)}
	req.ShareSources = map[string]string{vmspec.ShareTag("/etc/app.conf"): file}
	_, err := vm.Create(ctx, req, open)
	if err == nil || !strings.Contains(err.Error(), "/etc/app.conf is a file") {
		t.Fatalf("Create = %v, want the file volume refused by its mount path", err)
	}
	if got := rec.last(); !got.Empty() {
		t.Errorf("last record %+v, want nothing held", got)
	}
	assertGone(t, rt, req.Spec.Name, 0, req.Layout.Dir)
}

// jailedRequest is lifecycleRequest for the test guest as a pod named
// name, in a pod dir of its own under the test runtime's root, with the
// pod's jail; and the Opener of that runtime.
func jailedRequest(t *testing.T, name string, rec *records) (vm.Request, vm.Opener, *vm.Runtime) {
	t.Helper()
	rt, h, root := runtimeForTest(t)
	dir, err := os.MkdirTemp(root, "pod-")
	if err != nil {
		t.Fatal(err)
	}
	req := lifecycleRequest(t, "boot-pod.yaml", name, dir, rec)
	req.Jail = jailForTest(t, root, dir)
	return req, func(context.Context) (vm.Env, error) { return vm.Env{Runtime: rt, Host: h}, nil }, rt
}

type proc struct {
	pid             int
	status, cmdline string
}

// processesOf are the live processes that run as uid.
func processesOf(t *testing.T, uid uint32) []proc {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []proc
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err != nil {
			continue
		}
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			continue
		}
		uids := strings.Fields(procStatusField(string(st), "Uid"))
		state := procStatusField(string(st), "State")
		if len(uids) == 0 || uids[0] != fmt.Sprint(uid) || strings.HasPrefix(state, "Z") {
			continue
		}
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		out = append(out, proc{pid: pid, status: string(st), cmdline: strings.ReplaceAll(string(cmd), "\x00", " ")})
	}
	return out
}

// cgroupOfPID is pid's cgroup in the memory hierarchy (v1) or the
// unified one.
func cgroupOfPID(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) == 3 && (podcgroup.Unified() && f[0] == "0" || strings.Contains(","+f[1]+",", ",memory,")) {
			return f[2]
		}
	}
	return ""
}

// memoryUsageFile is the memory cgroup's usage file, v1 or v2.
func memoryUsageFile() string {
	if podcgroup.Unified() {
		return "memory.current"
	}
	return "memory.usage_in_bytes"
}

// TestCheckPodLimitCountsShares: the pod's limit must hold the file
// servers of the VM's shares beside its overhead; QEMU's own limit is all
// the pod's limit holds (some of the shares' part is QEMU's, and the pod's
// limit bounds QEMU and its file servers together).
func TestCheckPodLimitCountsShares(t *testing.T) {
	spec, err := vmspec.FromPod(podFromFile(t, "boot-pod.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var tcg host.Host // no KVM: the TCG model
	limit := spec.MemoryBytes + vmspec.OverheadTCG.Bytes(spec.MemoryBytes, spec.VCPUs)
	if err := vm.CheckPodLimit(spec, tcg, limit); err != nil {
		t.Fatalf("no shares, pod limit guest RAM + overhead: %v", err)
	}
	spec.Shares = []vmspec.Share{vmspec.NewShare("/data", false), vmspec.NewShare("/etc/config", true)}
	if got, want := vm.MemoryLimit(spec, tcg), limit+vmspec.SharesOverheadBytes(spec.MemoryBytes, 2); got != want {
		t.Errorf("QEMU's limit with shares %d MiB, want %d MiB (with the shares' part)", got>>20, want>>20)
	}
	err = vm.CheckPodLimit(spec, tcg, limit)
	if !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "for its 2 virtio-fs shares") {
		t.Errorf("2 shares in a pod limit without room for them: %v, want FailedPrecondition naming the shares", err)
	}
	if err := vm.CheckPodLimit(spec, tcg, limit+vmspec.SharesOverheadBytes(spec.MemoryBytes, 2)); err != nil {
		t.Errorf("2 shares, pod limit with room for them: %v", err)
	}
}
