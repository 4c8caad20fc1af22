package libvirt

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	lv "libvirt.org/go/libvirt"
)

// cgroupGlobs find the per-domain cgroup dirs the embedded driver creates:
// <mount>/machine/qemu-embed-<hash>-<id>-<name>.libvirt-qemu in every
// cgroup v1 hierarchy (cpu, cpuset, memory, blkio, freezer) and in the
// hybrid "unified" one, or directly under /sys/fs/cgroup with pure v2.
var cgroupGlobs = []string{"/sys/fs/cgroup/*/machine/", "/sys/fs/cgroup/machine/"}

// machinePrefix is how libvirt starts the machine name, and so the cgroup
// dir name, of every domain of an embed root: the first 8 hex digits of
// SHA-256 of the root keep two roots' "domain 1 named vm" apart.
func machinePrefix(root string) string {
	sum := sha256.Sum256([]byte(root))
	return "qemu-embed-" + hex.EncodeToString(sum[:])[:8] + "-"
}

// leftoverCgroups lists the cgroup dirs named after this root's domains,
// live or not.
func leftoverCgroups(root string) []string {
	var dirs []string
	for _, g := range cgroupGlobs {
		m, _ := filepath.Glob(g + machinePrefix(root) + "*.libvirt-qemu")
		dirs = append(dirs, m...)
	}
	return dirs
}

// sweepCgroups removes the cgroup dirs of this root's domains that no QEMU
// uses any more. libvirt removes them itself when it stops a QEMU it
// watched, but not for one it finds dead on re-attach, nor when Destroy
// races the re-attach (seen with libvirt 9.0 on cgroup v1; OpenEmbedded
// avoids the race, see awaitReconnect). Left alone they pile up with every
// restart of a pod.
//
// Best effort: a dir that still has tasks cannot be removed (EBUSY) and is
// not ours to empty; if the live domains cannot be told apart, nothing is
// touched.
func (c *Conn) sweepCgroups() {
	live, err := c.liveCgroups()
	if err != nil {
		return
	}
	for _, dir := range leftoverCgroups(c.root) {
		if !live[filepath.Base(dir)] {
			removeCgroupTree(dir)
		}
	}
}

// liveCgroups returns the base names of the cgroup dirs the running QEMUs
// of this root are in, read from /proc/<pid>/cgroup rather than recomputed
// from libvirt's naming rules.
func (c *Conn) liveCgroups() (map[string]bool, error) {
	doms, err := c.conn.ListAllDomains(lv.CONNECT_LIST_DOMAINS_ACTIVE)
	if err != nil {
		return nil, err
	}
	defer func() {
		for i := range doms {
			_ = doms[i].Free()
		}
	}()
	live := map[string]bool{}
	for i := range doms {
		name, err := doms[i].GetName()
		if err != nil {
			return nil, err
		}
		pid, err := c.pid(name)
		if err != nil {
			return nil, err
		}
		dirs, err := procCgroups(pid, machinePrefix(c.root))
		if err != nil {
			return nil, err
		}
		if len(dirs) == 0 {
			return nil, fmt.Errorf("QEMU %d of %s is in no cgroup of this root", pid, subject(name))
		}
		for _, d := range dirs {
			live[d] = true
		}
	}
	return live, nil
}

// procCgroups returns the path elements starting with prefix in the
// cgroup paths of pid (e.g. "qemu-embed-1234abcd-1-vm.libvirt-qemu" from
// "4:memory:/machine/qemu-embed-1234abcd-1-vm.libvirt-qemu").
func procCgroups(pid int, prefix string) ([]string, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var dirs []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		_, path, _ := strings.Cut(s.Text(), ":")
		_, path, _ = strings.Cut(path, ":")
		for _, elem := range strings.Split(path, "/") {
			if strings.HasPrefix(elem, prefix) {
				dirs = append(dirs, elem)
			}
		}
	}
	return dirs, s.Err()
}

// removeCgroupTree removes dir and its sub-cgroups (emulator, vcpuN,
// iothreadN) deepest first. rmdir is the only way to delete a cgroup and
// fails on one with tasks, which is what makes this safe.
func removeCgroupTree(dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.IsDir() {
			removeCgroupTree(filepath.Join(dir, e.Name()))
		}
	}
	_ = os.Remove(dir)
}
