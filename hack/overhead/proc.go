package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// mib is bytes in MiB, for tables.
func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// mapping is one /proc/<pid>/smaps entry.
type mapping struct {
	perms     string
	anonymous bool // no file behind it (inode 0, no name or a [heap]-like one)
	name      string
	size, rss uint64
	hugeRSS   uint64 // AnonHugePages: resident in transparent huge pages
	anonRSS   uint64 // Anonymous: resident anonymous pages (incl. copied-on-write file pages)
}

// smaps reads /proc/<pid>/smaps.
func smaps(pid int) ([]mapping, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		return nil, err
	}
	var maps []mapping
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 5 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":") {
			m := mapping{perms: f[1], anonymous: f[4] == "0"}
			if len(f) >= 6 {
				m.name = f[5]
			}
			maps = append(maps, m)
			continue
		}
		if len(maps) == 0 || len(f) < 2 {
			continue
		}
		cur := &maps[len(maps)-1]
		switch f[0] {
		case "Size:":
			cur.size = kib(f[1])
		case "Rss:":
			cur.rss = kib(f[1])
		case "Anonymous:":
			cur.anonRSS = kib(f[1])
		case "AnonHugePages:":
			cur.hugeRSS = kib(f[1])
		}
	}
	return maps, sc.Err()
}

// guestRAM finds QEMU's guest RAM block: the anonymous mapping of (at
// least, and at most a few MiB more than) the guest's memory size. It
// returns its index in maps, or -1.
func guestRAM(maps []mapping, guestBytes uint64) int {
	best := -1
	for i, m := range maps {
		if m.anonymous && m.name == "" && m.size >= guestBytes && m.size <= guestBytes+8<<20 &&
			(best < 0 || m.size > maps[best].size) {
			best = i
		}
	}
	return best
}

// tbCache finds TCG's translation buffer: the largest anonymous executable
// mapping.
func tbCache(maps []mapping) (mapping, bool) {
	var best mapping
	found := false
	for _, m := range maps {
		if m.anonymous && m.name == "" && strings.Contains(m.perms, "x") && m.size > best.size {
			best, found = m, true
		}
	}
	return best, found
}

func kib(s string) uint64 {
	v, _ := strconv.ParseUint(s, 10, 64)
	return v << 10
}

// memoryCgroup is the cgroup v1 memory controller directory of pid, or ""
// on a host without one.
func memoryCgroup(pid int) string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(data), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == "memory" {
				return filepath.Join("/sys/fs/cgroup/memory", parts[2])
			}
		}
	}
	return ""
}

func readUint(path string) (uint64, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
	return v, err == nil
}
