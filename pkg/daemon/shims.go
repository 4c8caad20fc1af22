package daemon

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// servedPods lists the sandbox ids that a vmpod shim running on the
// machine (in procDir, /proc) serves: a shim's command line is vm-runtime's
// "shim ... -id <sandbox id> ..." (pkg/shim's manager), or
// containerd-shim-vmpod-v2's with the same flags as containerd starts it,
// for `start` or for the `delete` of a dead shim's bundle, which calls the
// daemon too. Only root's processes count. A process that ends while it
// is read is skipped.
func servedPods(procDir string) (map[string]bool, error) {
	entries, err := os.ReadDir(procDir)
	if err != nil {
		return nil, err
	}
	pods := map[string]bool{}
	for _, e := range entries {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		// A shim runs as root: a process of another uid (a QEMU of the
		// jail's, rewriting its own argv) names no pod.
		if fi, err := os.Stat(filepath.Join(procDir, e.Name())); err != nil || fi.Sys().(*syscall.Stat_t).Uid != 0 {
			continue
		}
		b, err := os.ReadFile(filepath.Join(procDir, e.Name(), "cmdline"))
		if err != nil || len(b) == 0 {
			continue
		}
		argv := strings.Split(string(bytes.TrimRight(b, "\x00")), "\x00")
		prog := filepath.Base(argv[0])
		if !(prog == "containerd-shim-vmpod-v2" || (len(argv) > 1 && argv[1] == "shim" && strings.HasPrefix(prog, "vm-runtime"))) {
			continue
		}
		for i, a := range argv[:len(argv)-1] {
			if a == "-id" || a == "--id" {
				pods[argv[i+1]] = true
			}
		}
	}
	return pods, nil
}

// owns reports whether one of pods is, or begins with, id.
func owns(pods map[string]bool, id string) bool {
	if pods[id] {
		return true
	}
	for p := range pods {
		if strings.HasPrefix(p, id) {
			return true
		}
	}
	return false
}
