package procmem

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Kind is a class of mapping.
type Kind string

const (
	Binary      Kind = "binary"        // the process's executable file
	SharedLibs  Kind = "shared libs"   // other file mappings (.so, locale, ...)
	GoHeap      Kind = "Go heap"       // Go's arenas
	MallocBrk   Kind = "malloc brk"    // [heap]: glibc's main arena
	MallocArena Kind = "malloc arenas" // glibc's per-thread arenas
	Stacks      Kind = "thread stacks" // pthread stacks and [stack]
	OtherAnon   Kind = "other anon"    // Go runtime metadata, cgo mmaps, ...
)

// Kinds in the order reports show them.
var Kinds = []Kind{Binary, SharedLibs, GoHeap, MallocBrk, MallocArena, Stacks, OtherAnon}

// Usage is memory in KiB.
type Usage struct {
	RSS, PSS, PrivateAnon, Swap int
}

func (u *Usage) add(v Usage) {
	u.RSS += v.RSS
	u.PSS += v.PSS
	u.PrivateAnon += v.PrivateAnon
	u.Swap += v.Swap
}

// Process is one process's memory, whole and by kind.
type Process struct {
	PID     int
	Total   Usage
	ByKind  map[Kind]Usage
	Threads int
	// LargestAnon is the largest mapping not backed by a file (in QEMU:
	// the guest's RAM), and LargestAnonKiB its size; Add sums both.
	LargestAnon    Usage
	LargestAnonKiB int
}

// Add sums q into p (for totals over processes).
func (p *Process) Add(q Process) {
	if p.ByKind == nil {
		p.ByKind = map[Kind]Usage{}
	}
	p.Total.add(q.Total)
	for k, u := range q.ByKind {
		v := p.ByKind[k]
		v.add(u)
		p.ByKind[k] = v
	}
	p.Threads += q.Threads
	p.LargestAnon.add(q.LargestAnon)
	p.LargestAnonKiB += q.LargestAnonKiB
}

type mapping struct {
	start, end uint64
	perms      string
	path       string
	u          Usage
	anon       int // Anonymous: KiB
}

const (
	goArenaStart = 4 << 30
	goArenaEnd   = 0x7e0000000000
	heapMax      = 64 << 20
	page         = 4096
)

// Read reads pid's smaps.
func Read(pid int) (Process, error) {
	dir := "/proc/" + strconv.Itoa(pid)
	exe, _ := os.Readlink(dir + "/exe")
	exe = strings.TrimSuffix(exe, " (deleted)")
	f, err := os.Open(dir + "/smaps")
	if err != nil {
		return Process{}, err
	}
	defer f.Close()
	var maps []mapping
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if !strings.HasSuffix(fields[0], ":") {
			// A mapping header: start-end perms offset dev inode [path].
			lo, hi, ok := strings.Cut(fields[0], "-")
			if !ok || len(fields) < 5 {
				return Process{}, fmt.Errorf("smaps of %d: bad line %q", pid, line)
			}
			m := mapping{perms: fields[1]}
			m.start, _ = strconv.ParseUint(lo, 16, 64)
			m.end, _ = strconv.ParseUint(hi, 16, 64)
			if len(fields) >= 6 {
				m.path = strings.Join(fields[5:], " ")
			}
			maps = append(maps, m)
			continue
		}
		if len(maps) == 0 || len(fields) < 2 {
			continue
		}
		v, err := strconv.Atoi(fields[1])
		if err != nil {
			continue
		}
		m := &maps[len(maps)-1]
		switch fields[0] {
		case "Rss:":
			m.u.RSS = v
		case "Pss:":
			m.u.PSS = v
		case "Anonymous:":
			m.anon = v
		case "Swap:":
			m.u.Swap = v
		case "Private_Dirty:", "Private_Clean:":
			// Private anonymous is counted from Anonymous below: an
			// anonymous page shared after a fork is not private.
		}
	}
	if err := sc.Err(); err != nil {
		return Process{}, fmt.Errorf("smaps of %d: %w", pid, err)
	}
	p := Process{PID: pid, ByKind: map[Kind]Usage{}}
	for i := range maps {
		m := &maps[i]
		// Anonymous pages of a process that never forked after touching
		// them are private; a shim does not fork with a big heap.
		m.u.PrivateAnon = m.anon
		k := classify(maps, i, exe)
		u := p.ByKind[k]
		u.add(m.u)
		p.ByKind[k] = u
		p.Total.add(m.u)
		if size := int((m.end - m.start) >> 10); !strings.HasPrefix(m.path, "/") && size > p.LargestAnonKiB {
			p.LargestAnon, p.LargestAnonKiB = m.u, size
		}
	}
	p.Threads = threads(dir)
	return p, nil
}

func classify(maps []mapping, i int, exe string) Kind {
	m := maps[i]
	switch {
	case m.path == "[heap]":
		return MallocBrk
	case m.path == "[stack]":
		return Stacks
	case exe != "" && m.path == exe:
		return Binary
	case strings.HasPrefix(m.path, "/"):
		return SharedLibs
	case strings.HasPrefix(m.path, "["): // [vdso], [vvar], [vsyscall]
		return SharedLibs
	case m.path != "": // memfd:, anon names
		return OtherAnon
	case m.start >= goArenaStart && m.end <= goArenaEnd:
		return GoHeap
	case m.start%heapMax == 0 && m.perms[:2] == "rw" && i+1 < len(maps) &&
		maps[i+1].start == m.end && maps[i+1].perms[:3] == "---" &&
		maps[i+1].end-m.start <= heapMax:
		return MallocArena
	case m.perms[:2] == "rw" && i > 0 && maps[i-1].end == m.start &&
		maps[i-1].perms[:3] == "---" && maps[i-1].end-maps[i-1].start == page && maps[i-1].path == "":
		return Stacks
	}
	return OtherAnon
}

func threads(dir string) int {
	entries, err := os.ReadDir(filepath.Join(dir, "task"))
	if err != nil {
		return 0
	}
	return len(entries)
}

// MiB formats KiB as MiB with one decimal.
func MiB(kib int) string { return strconv.FormatFloat(float64(kib)/1024, 'f', 1, 64) }

// KeyValues reads a file of "Key: 123 kB" or "key 123" lines
// (/proc/PID/status, smaps_rollup, a cgroup's memory.stat) into a map, kB
// values scaled to bytes; lines of another shape are skipped.
func KeyValues(path string) (map[string]uint64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]uint64{}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			continue
		}
		if len(f) >= 3 && f[2] == "kB" {
			v <<= 10
		}
		out[strings.TrimSuffix(f[0], ":")] = v
	}
	return out, nil
}
