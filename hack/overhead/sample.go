package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"

	"github.com/vmpod/vmpod/internal/procmem"
)

// sample is one look at a running VM's memory, in bytes.
type sample struct {
	// GuestTouched is the resident part of the guest RAM mapping: guest
	// pages QEMU had to back; GuestMapped is that mapping's size.
	GuestTouched, GuestMapped uint64
	// GuestHuge is how much of GuestTouched is in transparent huge pages.
	GuestHuge uint64
	// OtherAnon is the resident anonymous memory of every other mapping:
	// QEMU's own heap, thread arenas and stacks, the TCG translation
	// buffer and soft TLBs. Read from the same smaps pass, so a guest
	// touching memory meanwhile does not skew it.
	OtherAnon uint64
	// RSS and PSS are QEMU's (smaps_rollup), RSS split into anonymous
	// memory (guest RAM included) and file pages (the QEMU binary and
	// libraries, and the guest kernel image QEMU keeps mapped for direct
	// kernel boot: page cache, which the kernel reclaims before it
	// OOM-kills). PTE is QEMU's page tables (VmPTE), which RSS does not
	// count and the memory cgroup does.
	RSS, PSS, Anon, File, PTE uint64
	// TBSize and TBResident are TCG's translation buffer (tb-cache): its
	// size and how much of it the guest has filled so far.
	TBSize, TBResident uint64
	// CgroupUsage and CgroupCache are QEMU's memory cgroup (v1) usage and
	// its page cache part (reclaimable; files QEMU read: kernel, initrd,
	// disk). CgroupOK is false where they could not be read.
	CgroupUsage, CgroupCache uint64
	CgroupOK                 bool
	// Shim is this process's RSS: the stand-in for the pod's vmpod shim,
	// which holds the same embedded libvirt.
	Shim uint64
}

// QEMUOverhead is the memory QEMU holds beyond the guest pages it backs
// that the kernel cannot reclaim: anonymous memory outside guest RAM plus
// page tables, or, where it is more, the cgroup's charge less its page
// cache and the guest pages (that adds kernel memory, but reads three
// files at different moments: use it only once the guest is idle).
func (s sample) QEMUOverhead() uint64 {
	used := s.OtherAnon + s.PTE
	if s.CgroupOK && s.CgroupUsage > s.CgroupCache+s.GuestTouched {
		used = max(used, s.CgroupUsage-s.CgroupCache-s.GuestTouched)
	}
	return used
}

// bootOverhead is QEMUOverhead from smaps and status alone, safe while
// the guest is busy touching memory.
func (s sample) bootOverhead() uint64 { return s.OtherAnon + s.PTE }

// TBUnfilled is the part of the translation buffer a longer-running guest
// can still fill; the model must hold it, the boot test does not use it.
func (s sample) TBUnfilled() uint64 { return s.TBSize - min(s.TBSize, s.TBResident) }

func (s sample) max(o sample) sample {
	return sample{
		GuestTouched: max(s.GuestTouched, o.GuestTouched), GuestMapped: max(s.GuestMapped, o.GuestMapped),
		GuestHuge: max(s.GuestHuge, o.GuestHuge), OtherAnon: max(s.OtherAnon, o.OtherAnon),
		RSS: max(s.RSS, o.RSS), PSS: max(s.PSS, o.PSS), Anon: max(s.Anon, o.Anon), File: max(s.File, o.File),
		PTE:    max(s.PTE, o.PTE),
		TBSize: max(s.TBSize, o.TBSize), TBResident: max(s.TBResident, o.TBResident),
		CgroupUsage: max(s.CgroupUsage, o.CgroupUsage), CgroupCache: max(s.CgroupCache, o.CgroupCache),
		CgroupOK: s.CgroupOK || o.CgroupOK, Shim: max(s.Shim, o.Shim),
	}
}

func takeSample(pid int, guestBytes uint64) (sample, error) {
	var s sample
	maps, err := smaps(pid)
	if err != nil {
		return s, err
	}
	i := guestRAM(maps, guestBytes)
	if i < 0 {
		return s, fmt.Errorf("QEMU pid %d: no anonymous mapping of %d MiB (guest RAM) in smaps", pid, guestBytes>>20)
	}
	ram := maps[i]
	s.GuestTouched, s.GuestMapped, s.GuestHuge = ram.rss, ram.size, ram.hugeRSS
	for j, m := range maps {
		if j != i {
			s.OtherAnon += m.anonRSS
		}
	}
	if tb, ok := tbCache(maps); ok {
		s.TBSize, s.TBResident = tb.size, tb.rss
	}
	rollup, err := procmem.KeyValues(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return s, err
	}
	s.RSS, s.PSS = rollup["Rss"], rollup["Pss"]
	status, err := procmem.KeyValues(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, err
	}
	s.PTE, s.Anon, s.File = status["VmPTE"], status["RssAnon"], status["RssFile"]
	// Only QEMU's own cgroup says anything; a shared one (the root, or this
	// process's) counts other processes too.
	if dir := memoryCgroup(pid); dir != "" && dir != memoryCgroup(os.Getpid()) && dir != "/sys/fs/cgroup/memory/" {
		usage, ok1 := readUint(filepath.Join(dir, "memory.usage_in_bytes"))
		stat, err := procmem.KeyValues(filepath.Join(dir, "memory.stat"))
		if ok1 && err == nil {
			s.CgroupUsage, s.CgroupCache, s.CgroupOK = usage, stat["cache"], true
		}
	}
	return s, nil
}

// selfRSS is this process's RSS once the Go runtime has given back what
// it no longer uses, as a long-running shim's would.
func selfRSS() uint64 {
	runtime.GC()
	debug.FreeOSMemory()
	st, err := procmem.KeyValues("/proc/self/status")
	if err != nil {
		return 0
	}
	return st["VmRSS"]
}
