// Package podenv gives a test what a node gives a pod: network namespaces
// for the node and the pod joined by a veth, and a pod-level cgroup, each
// removed when the test ends. Tests only; every address lives in the
// namespaces made here.
package podenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

var seq atomic.Int64

// Network makes a node netns and a pod netns joined by a veth: pod eth0
// 10.99.0.5/24 with the node's end 10.99.0.1 as its gateway. Both are
// removed when the test ends.
func Network(t testing.TB) (nodeNS, podNS, podIP string) {
	t.Helper()
	tag := fmt.Sprintf("vmpodt%d-%d", os.Getpid()%100000, seq.Add(1))
	node, pod := tag+"n", tag+"p"
	run(t, "ip", "netns", "add", node)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", node).Run() })
	run(t, "ip", "netns", "add", pod)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", pod).Run() })
	run(t, "ip", "-n", node, "link", "add", "veth0", "type", "veth", "peer", "name", "eth0", "netns", pod)
	run(t, "ip", "-n", node, "addr", "add", "10.99.0.1/24", "dev", "veth0")
	run(t, "ip", "-n", node, "link", "set", "veth0", "up")
	run(t, "ip", "-n", node, "link", "set", "lo", "up")
	run(t, "ip", "-n", pod, "addr", "add", "10.99.0.5/24", "dev", "eth0")
	run(t, "ip", "-n", pod, "link", "set", "eth0", "up")
	run(t, "ip", "-n", pod, "link", "set", "lo", "up")
	run(t, "ip", "-n", pod, "route", "add", "default", "via", "10.99.0.1")
	return "/run/netns/" + node, "/run/netns/" + pod, "10.99.0.5"
}

// CgroupParent makes the name of a pod-level cgroup, as the kubelet's
// cgroupfs driver would (the runtime makes the dirs), and removes what is
// left under it in every hierarchy when the test ends.
func CgroupParent(t testing.TB) string {
	t.Helper()
	parent := fmt.Sprintf("/vmpod-test-%d/pod%d", os.Getpid(), seq.Add(1))
	t.Cleanup(func() {
		ctrls, _ := filepath.Glob("/sys/fs/cgroup/*")
		for _, c := range ctrls {
			top := filepath.Join(c, filepath.Dir(parent))
			// Remove bottom-up; rmdir fails on a cgroup that still has tasks.
			var dirs []string
			_ = filepath.WalkDir(top, func(p string, d os.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					dirs = append(dirs, p)
				}
				return nil
			})
			for i := len(dirs) - 1; i >= 0; i-- {
				_ = os.Remove(dirs[i])
			}
		}
	})
	return parent
}

func run(t testing.TB, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}
