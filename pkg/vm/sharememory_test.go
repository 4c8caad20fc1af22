package vm_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vmpod/vmpod/pkg/podcgroup"
	"github.com/vmpod/vmpod/pkg/vm"
	"github.com/vmpod/vmpod/pkg/vmspec"

	"github.com/vmpod/vmpod/internal/procmem"
)

// BenchmarkShareMemory boots the test guest (1 GiB, 1 vCPU, all of its
// RAM touched at boot by init_on_free=1, as hack/measure-overhead.sh
// has it) with 0, 1 and 4 virtio-fs shares, has the guest read a file from each share and
// write 1 MiB into it through the agent, and reports what the shares
// cost (make bench, -benchtime 1x; docs/overhead.md, "Shares"):
//
//   - fs-cgroup-MiB/share: the file servers' cgroup usage, beside QEMU's
//     under the pod's, page cache included (what the pod limit sees);
//   - fs-anon-MiB/share: the same less its page cache (what the kernel
//     cannot reclaim: anonymous memory and kernel memory);
//   - fs-kmem-MiB/share: the kernel memory in that usage;
//   - fs-PSS-MiB/share, fs-PSS-shmem-MiB/share: the file server processes'
//     summed PSS, and the part of it that is shared memory (the guest
//     RAM they map, charged to QEMU's cgroup);
//   - qemu-*: QEMU's cgroup, whose guest RAM is a shared memfd once the
//     VM has a share (private anonymous memory without): its usage,
//     memory.stat's rss, shmem and cache (cgroup v1 counts memfd pages as
//     shmem within cache; v2's anon, shmem, file), its kernel memory; from
//     QEMU's smaps, the guest RAM it has resident, its anonymous memory
//     outside guest RAM and its page tables; and qemu-beyond-guest-MiB =
//     usage less reclaimable page cache (cache − shmem) less the resident
//     guest RAM, with its difference from the VM without shares
//     (qemu-beyond-guest-vs0-MiB).
//
// Then, busy-fs-*: the same after the guest created and listed 1,000
// files in each share and wrote 1 MiB from 8 processes at once. QEMU's
// numbers are taken before it.
//
// It measures, it asserts nothing about the numbers.
func BenchmarkShareMemory(b *testing.B) {
	var beyond0 float64
	measured0 := false
	for _, n := range []int{0, 1, 4} {
		b.Run(fmt.Sprintf("shares=%d", n), func(b *testing.B) {
			m := shareMemory(b, n)
			if n > 0 {
				per := func(v uint64) float64 { return mib(v) / float64(n) }
				b.ReportMetric(per(m.fs.usage), "fs-cgroup-MiB/share")
				b.ReportMetric(per(m.fs.usage-min(m.fs.usage, m.fs.cache)), "fs-anon-MiB/share")
				b.ReportMetric(per(m.fsPSS), "fs-PSS-MiB/share")
				b.ReportMetric(per(m.fsPSSShmem), "fs-PSS-shmem-MiB/share")
				b.ReportMetric(per(m.fs.kmem), "fs-kmem-MiB/share")
				b.ReportMetric(float64(m.fsProcs), "fs-procs")
				b.ReportMetric(per(m.busyFS.usage), "busy-fs-cgroup-MiB/share")
				b.ReportMetric(per(m.busyFS.usage-min(m.busyFS.usage, m.busyFS.cache)), "busy-fs-anon-MiB/share")
				b.ReportMetric(per(m.busyFS.kmem), "busy-fs-kmem-MiB/share")
				b.ReportMetric(per(m.busyPSS), "busy-fs-PSS-MiB/share")
			}
			beyond := mib(m.qemu.usage-min(m.qemu.usage, m.qemu.cache-min(m.qemu.cache, m.qemu.shmem))) - mib(m.guestRes)
			b.ReportMetric(mib(m.qemu.usage), "qemu-cgroup-MiB")
			b.ReportMetric(mib(m.qemu.rss), "qemu-rss-MiB")
			b.ReportMetric(mib(m.qemu.shmem), "qemu-shmem-MiB")
			b.ReportMetric(mib(m.qemu.cache), "qemu-cache-MiB")
			b.ReportMetric(mib(m.qemu.kmem), "qemu-kmem-MiB")
			b.ReportMetric(mib(m.guestRes), "qemu-guest-res-MiB")
			b.ReportMetric(mib(m.qemuOtherAnon), "qemu-anon-outside-guest-MiB")
			b.ReportMetric(mib(m.qemuPTE), "qemu-PTE-MiB")
			b.ReportMetric(beyond, "qemu-beyond-guest-MiB")
			if n == 0 {
				beyond0, measured0 = beyond, true
			} else if measured0 {
				b.ReportMetric(beyond-beyond0, "qemu-beyond-guest-vs0-MiB")
			}
		})
	}
}

// shareMemoryResult is what one VM of BenchmarkShareMemory holds.
type shareMemoryResult struct {
	fs, qemu          cgroupMemory
	fsPSS, fsPSSShmem uint64
	fsProcs           int
	guestRes          uint64 // guest RAM resident in QEMU
	qemuOtherAnon     uint64 // QEMU's anonymous memory outside guest RAM
	qemuPTE           uint64
	busyFS            cgroupMemory // after the busy workload
	busyPSS           uint64
}

// shareMemory boots the test guest with n read-write shares, touches each
// from the guest, measures, and deletes the VM.
func shareMemory(b *testing.B, n int) shareMemoryResult {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rt, h, root := runtimeForTest(b)
	dir, err := os.MkdirTemp(root, "pod-")
	if err != nil {
		b.Fatal(err)
	}
	var rec records
	req := lifecycleRequest(b, "boot-pod.yaml", fmt.Sprintf("sharemem%d", n), dir, &rec)
	req.Jail = jailForTest(b, root, dir)
	req.Spec.MemoryBytes = 1 << 30
	req.Spec.Boot.Cmdline = strings.TrimSpace(req.Spec.Boot.Cmdline + " init_on_free=1")
	req.ShareSources = map[string]string{}
	for i := range n {
		path := fmt.Sprintf("/mnt/share%d", i)
		src := b.TempDir()
		if err := os.WriteFile(filepath.Join(src, "hello"), []byte("from the host\n"), 0o644); err != nil {
			b.Fatal(err)
		}
		req.Spec.Shares = append(req.Spec.Shares, vmspec.NewShare(path, false))
		req.ShareSources[vmspec.ShareTag(path)] = src
	}
	vmspec.SortShares(req.Spec.Shares)

	v, err := vm.Create(ctx, req, func(context.Context) (vm.Env, error) { return vm.Env{Runtime: rt, Host: h}, nil })
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := v.Delete(context.Background()); err != nil {
			b.Error(err)
		}
	}()
	pid, err := v.Start(ctx)
	if err != nil {
		b.Fatal(err)
	}
	con := watchConsole(b, req.Layout.ConsoleLog())
	for _, sh := range req.Spec.Shares {
		con.waitFor(ctx, b, "VMPOD-GUEST: share "+sh.MountPath+" ok")
	}
	con.waitFor(ctx, b, "VMPOD-GUEST: ready")
	for _, sh := range req.Spec.Shares {
		p := sh.MountPath
		script := "cat " + p + "/hello >/dev/null && dd if=/dev/zero of=" + p + "/blob bs=1M count=1 2>/dev/null && sync && cat " + p + "/blob >/dev/null"
		res, err := v.Exec(ctx, vm.ExecRequest{Args: []string{"/bin/sh", "-c", script}})
		if err != nil {
			b.Fatal(err)
		}
		if res.ExitCode != 0 {
			b.Fatalf("touching %s in the guest: exit %d: %s", p, res.ExitCode, res.Stderr)
		}
		if st, err := os.Stat(filepath.Join(req.ShareSources[vmspec.ShareTag(p)], "blob")); err != nil || st.Size() != 1<<20 {
			b.Fatalf("the guest's 1 MiB write to %s did not reach the host: %v", p, err)
		}
	}

	var m shareMemoryResult
	if m.qemu, err = readCgroupMemory(req.Cgroup); err != nil {
		b.Fatal(err)
	}
	if m.guestRes, m.qemuOtherAnon, m.qemuPTE, err = qemuMemory(pid, req.Spec.MemoryBytes); err != nil {
		b.Fatal(err)
	}
	if n == 0 {
		return m
	}
	fs := req.Cgroup.Sibling("fs")
	m.fs, m.fsPSS, m.fsPSSShmem, m.fsProcs = fileServerMemory(b, fs)

	// Busy: the guest knows 1,000 more files in each share (the server
	// keeps an inode and an O_PATH fd for each file the guest has looked
	// up) and writes from 8 processes at once.
	for _, sh := range req.Spec.Shares {
		script := "cd " + sh.MountPath + " && mkdir many && i=0 && while [ $i -lt 1000 ]; do echo $i >many/$i; i=$((i+1)); done && " +
			"ls -l many >/dev/null && for j in 1 2 3 4 5 6 7 8; do dd if=/dev/zero of=par$j bs=1M count=1 2>/dev/null & done; wait; sync"
		res, err := v.Exec(ctx, vm.ExecRequest{Args: []string{"/bin/sh", "-c", script}})
		if err != nil {
			b.Fatal(err)
		}
		if res.ExitCode != 0 {
			b.Fatalf("the busy workload in %s: exit %d: %s", sh.MountPath, res.ExitCode, res.Stderr)
		}
	}
	m.busyFS, m.busyPSS, _, _ = fileServerMemory(b, fs)
	return m
}

// fileServerMemory is the file servers' cgroup's memory and their
// processes' summed PSS and its shared-memory part.
func fileServerMemory(b *testing.B, fs podcgroup.Path) (cg cgroupMemory, pss, pssShmem uint64, procs int) {
	cg, err := readCgroupMemory(fs)
	if err != nil {
		b.Fatal(err)
	}
	list, err := os.ReadFile(cgroupProcs(fs))
	if err != nil {
		b.Fatal(err)
	}
	for _, f := range strings.Fields(string(list)) {
		kv, err := procmem.KeyValues(filepath.Join("/proc", f, "smaps_rollup"))
		if err != nil {
			b.Fatal(err)
		}
		pss += kv["Pss"]
		pssShmem += kv["Pss_Shmem"]
		procs++
	}
	return cg, pss, pssShmem, procs
}

// cgroupMemory is a memory cgroup's usage and memory.stat, as cgroup v1
// names them (v2's anon is rss, file is cache).
// kmem is the kernel memory charged to it (v1's memory.kmem.usage_in_bytes,
// v2's kernel).
type cgroupMemory struct{ usage, rss, cache, shmem, kmem uint64 }

func readCgroupMemory(p podcgroup.Path) (cgroupMemory, error) {
	dir := filepath.Dir(cgroupProcs(p))
	b, err := os.ReadFile(filepath.Join(dir, memoryUsageFile()))
	if err != nil {
		return cgroupMemory{}, err
	}
	usage, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return cgroupMemory{}, err
	}
	st, err := procmem.KeyValues(filepath.Join(dir, "memory.stat"))
	if err != nil {
		return cgroupMemory{}, err
	}
	if podcgroup.Unified() {
		return cgroupMemory{usage: usage, rss: st["anon"], cache: st["file"], shmem: st["shmem"], kmem: st["kernel"]}, nil
	}
	m := cgroupMemory{usage: usage, rss: st["rss"], cache: st["cache"], shmem: st["shmem"]}
	if b, err := os.ReadFile(filepath.Join(dir, "memory.kmem.usage_in_bytes")); err == nil {
		m.kmem, _ = strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	}
	return m, nil
}

// qemuMemory is what QEMU's smaps and status say: the resident part of
// its guest RAM block (the mapping of the guest's size, to a few MiB
// more, anonymous or a memfd), its anonymous memory outside that block,
// and its page tables.
func qemuMemory(pid int, guestBytes uint64) (guestRes, otherAnon, pte uint64, err error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		return 0, 0, 0, err
	}
	type mapping struct {
		candidate       bool
		size, rss, anon uint64
	}
	var maps []mapping
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 5 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":"):
			maps = append(maps, mapping{candidate: f[4] == "0" && len(f) == 5 || len(f) >= 6 && strings.HasPrefix(f[5], "/memfd:")})
		case len(maps) == 0 || len(f) < 2:
		case f[0] == "Size:":
			maps[len(maps)-1].size = kibBytes(f[1])
		case f[0] == "Rss:":
			maps[len(maps)-1].rss = kibBytes(f[1])
		case f[0] == "Anonymous:":
			maps[len(maps)-1].anon = kibBytes(f[1])
		}
	}
	guest := -1
	for i, m := range maps {
		if m.candidate && m.size >= guestBytes && m.size <= guestBytes+8<<20 && (guest < 0 || m.rss > maps[guest].rss) {
			guest = i
		}
	}
	if guest < 0 {
		return 0, 0, 0, fmt.Errorf("QEMU %d: no guest RAM mapping of %d MiB", pid, guestBytes>>20)
	}
	for i, m := range maps {
		if i != guest {
			otherAnon += m.anon
		}
	}
	st, err := procmem.KeyValues(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, 0, err
	}
	return maps[guest].rss, otherAnon, st["VmPTE"], nil
}

func kibBytes(s string) uint64 {
	v, _ := strconv.ParseUint(s, 10, 64)
	return v << 10
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }
