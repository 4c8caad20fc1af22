package procmem

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Children are the running processes named comm (as /proc/PID/stat gives
// it; "" any name) whose parent is one of parents.
func Children(parents []int, comm string) ([]int, error) {
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var out []int
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", d.Name(), "stat"))
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid ...
		s := string(stat)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open || (comm != "" && s[open+1:end] != comm) {
			continue
		}
		f := strings.Fields(s[end+1:])
		if len(f) < 2 {
			continue
		}
		if ppid, err := strconv.Atoi(f[1]); err == nil && slices.Contains(parents, ppid) {
			out = append(out, pid)
		}
	}
	return out, nil
}
