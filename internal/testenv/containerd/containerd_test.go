package containerd

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRuncPod drives the harness end to end with the runc runtime: a pod
// sandbox from the project's pause image gets an IP from the bridge inside
// the node's network namespace, survives a containerd restart, is removed,
// and Close leaves nothing behind.
func TestRuncPod(t *testing.T) {
	hostBefore := hostDefaults()
	c := Start(t, Options{})
	t.Logf("snapshotter %s, root %s", c.Snapshotter, c.Root)

	images := c.MustCrictl(t, "images", "-q")
	if !strings.Contains(c.MustCrictl(t, "images"), "localhost/vmpod/pause") {
		t.Fatalf("pause image not listed by crictl images:\n%s", images)
	}

	pod := c.NewPodConfig("pause", "default", "4a2d9b4e-0c57-4a40-9a51-6d1b63b1a0c1", map[string]string{"vmpod.io/test": "1"})
	start := time.Now()
	id := c.RunPod(t, pod, "")
	t.Logf("runp took %v", time.Since(start).Round(time.Millisecond))
	s := c.InspectPod(t, id)
	if s.State != "SANDBOX_READY" {
		t.Fatalf("pod state %s, want SANDBOX_READY", s.State)
	}
	_, pods, _ := net.ParseCIDR(c.PodCIDR)
	if ip := net.ParseIP(s.IP); ip == nil || !pods.Contains(ip) {
		t.Fatalf("pod IP %q not in %s", s.IP, c.PodCIDR)
	}
	if !strings.HasPrefix(s.NetNSPath, c.Root+"/") {
		t.Errorf("pod netns %q not under the root %s", s.NetNSPath, c.Root)
	}

	// The pod's address is on eth0 in its own netns, the bridge's gateway
	// address is in the node's, and the host has neither.
	out, err := c.Run(10*time.Second, "nsenter", "--net="+s.NetNSPath, "ip", "-4", "-o", "addr", "show", "dev", "eth0")
	if err != nil || !strings.Contains(out, " "+s.IP+"/16 ") {
		t.Errorf("pod eth0 (want %s): %q, %v", s.IP, out, err)
	}
	out, err = c.Run(10*time.Second, "ip", "-4", "-o", "addr", "show", "dev", "cni0")
	if err != nil || !strings.Contains(out, " 10.88.0.1/16 ") {
		t.Errorf("node cni0: %q, %v", out, err)
	}
	if _, err := net.InterfaceByName("cni0"); err == nil {
		t.Errorf("cni0 exists in the host's network namespace")
	}
	// From the node's netns to the pod over the bridge: one UDP datagram
	// (to the discard port) makes the node resolve the pod's MAC by ARP;
	// the neighbour entry it learns must be the pod's eth0. Nothing leaves
	// the node's netns.
	// (Not /sys/class/net: setns does not remount /sys, which still shows
	// the host's interfaces.)
	link, err := c.Run(10*time.Second, "nsenter", "--net="+s.NetNSPath, "ip", "-o", "link", "show", "dev", "eth0")
	if err != nil {
		t.Fatal(err)
	}
	var podMAC string
	if f := strings.Fields(link); len(f) > 0 {
		for i := range f[:len(f)-1] {
			if f[i] == "link/ether" {
				podMAC = f[i+1]
			}
		}
	}
	if podMAC == "" {
		t.Fatalf("no MAC on the pod's eth0: %q", link)
	}
	if _, err := c.Run(10*time.Second, "bash", "-c", "echo hi >/dev/udp/"+s.IP+"/9"); err != nil {
		t.Fatal(err)
	}
	var neigh string
	for i := 0; i < 50; i++ {
		neigh, _ = c.Run(10*time.Second, "ip", "neigh", "show", s.IP, "dev", "cni0")
		if strings.Contains(neigh, "lladdr") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(neigh, "lladdr "+podMAC) {
		t.Errorf("node's neighbour entry for %s: %q, want lladdr %s", s.IP, neigh, podMAC)
	}

	// The sandbox's processes sit under the cgroup parent.
	procs, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/pids", c.CgroupParent, "pod"+pod.Metadata.Uid, id, "cgroup.procs"))
	if err != nil || len(strings.Fields(string(procs))) == 0 {
		t.Errorf("sandbox cgroup: %q, %v", procs, err)
	}

	// A container in the pod (the pause image again: the only runnable one
	// the project builds), created and started as a kubelet would.
	ctr := NewContainerConfig("sleeper", c.PauseImage)
	ctr.Linux.Resources = Resources(250, 64<<20)
	ctrID := c.CreateContainer(t, id, ctr, pod)
	c.MustCrictl(t, "start", ctrID)
	if out := c.MustCrictl(t, "ps", "-q", "--state", "running"); !strings.Contains(out, ctrID) {
		t.Fatalf("container %s not running: %q", ctrID, out)
	}
	if _, err := os.Stat(filepath.Join(pod.LogDirectory, "sleeper", "0.log")); err != nil {
		t.Errorf("container log file: %v", err)
	}

	pauseStart, err := startTime(s.PID)
	if err != nil {
		t.Fatalf("pause process %d: %v", s.PID, err)
	}
	oldPID := c.PID()
	c.Restart(t)
	if c.PID() == oldPID || c.PID() == 0 {
		t.Fatalf("containerd pid %d after restart (was %d)", c.PID(), oldPID)
	}
	if s2 := c.InspectPod(t, id); s2.State != "SANDBOX_READY" || s2.IP != s.IP || s2.PID != s.PID || s.PID == 0 {
		t.Fatalf("after restart: state %s ip %s pid %d, want SANDBOX_READY %s %d", s2.State, s2.IP, s2.PID, s.IP, s.PID)
	}
	if !alive(s.PID, pauseStart) {
		t.Fatalf("pause process %d did not survive the restart", s.PID)
	}

	if out := c.MustCrictl(t, "ps", "-q", "--state", "running"); !strings.Contains(out, ctrID) {
		t.Fatalf("container %s not running after the restart: %q", ctrID, out)
	}

	c.StopRemovePod(t, id)
	if out := c.MustCrictl(t, "pods", "-q"); strings.TrimSpace(out) != "" {
		t.Errorf("pods left after rmp: %q", out)
	}

	// Close now (the cleanup would too) and check the host.
	root, netns, cg := c.Root, c.NetNS, c.CgroupParent
	inst := *c.inst
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if pids := inst.procs(false); len(pids) > 0 {
		t.Errorf("processes left: %v", pids)
	}
	if _, err := os.Stat(root); !os.IsNotExist(err) {
		t.Errorf("root %s still there: %v", root, err)
	}
	if _, err := os.Lstat(netns); !os.IsNotExist(err) {
		t.Errorf("netns %s still there: %v", netns, err)
	}
	if m, _ := mountsUnder(root); len(m) > 0 {
		t.Errorf("mounts left: %v", m)
	}
	mounts, _ := cgroupMounts()
	for _, mp := range mounts {
		if _, err := os.Stat(filepath.Join(mp, cg)); !os.IsNotExist(err) {
			t.Errorf("cgroup %s still there", filepath.Join(mp, cg))
		}
	}
	if diff := cmpHostDefaults(hostBefore, hostDefaults()); diff != "" {
		t.Errorf("the host's default containerd, CNI and NRI paths changed: %s", diff)
	}
}

// TestCloseKillsRunningPod is the cleanup a failing test gets: a pod still
// running (shim, pause process, netns, overlay mounts) when Close runs.
func TestCloseKillsRunningPod(t *testing.T) {
	c := Start(t, Options{})
	id := c.RunPod(t, c.NewPodConfig("left", "default", "0d6f3c2a-8f5e-4b7e-9a1c-2b3d4e5f6a7b", nil), "")
	s := c.InspectPod(t, id)
	pauseStart, err := startTime(s.PID)
	if err != nil {
		t.Fatalf("pause process %d: %v", s.PID, err)
	}
	root := c.Root
	inst := *c.inst
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if alive(s.PID, pauseStart) {
		t.Errorf("pause process %d survived Close", s.PID)
	}
	if pids := inst.procs(false); len(pids) > 0 {
		t.Errorf("processes left: %v", pids)
	}
	if _, err := os.Stat(root); !os.IsNotExist(err) {
		t.Errorf("root %s still there: %v", root, err)
	}
}

// TestVMPodRuntimeUsesShimDir checks the vmpod handler's wiring with a
// stand-in shim that records how containerd ran it and refuses to start.
func TestVMPodRuntimeUsesShimDir(t *testing.T) {
	for _, sandboxer := range []string{"podsandbox", "shim"} {
		t.Run(sandboxer, func(t *testing.T) { testVMPodRuntimeUsesShimDir(t, sandboxer) })
	}
}

func testVMPodRuntimeUsesShimDir(t *testing.T, sandboxer string) {
	shimDir := t.TempDir()
	record := filepath.Join(shimDir, "invoked")
	script := "#!/bin/sh\necho \"$0 $*\" >>" + record + "\necho 'stand-in shim' >&2\nexit 1\n"
	if err := os.WriteFile(filepath.Join(shimDir, "containerd-shim-vmpod-v2"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	c := Start(t, Options{ShimDir: shimDir, VMPodSandboxer: sandboxer})

	info := c.MustCrictl(t, "info")
	for _, want := range []string{`"io.containerd.vmpod.v2"`, `"vmpod.io/*"`, `"sandboxer": "` + sandboxer + `"`} {
		if !strings.Contains(info, want) {
			t.Errorf("crictl info lacks %s", want)
		}
	}
	pod := c.NewPodConfig("vm", "default", "7c1e2d3f-4a5b-4c6d-8e9f-0a1b2c3d4e5f", map[string]string{"vmpod.io/accel": "tcg"})
	path := c.WriteJSON(t, "vm-pod.json", pod)
	if _, err := c.Crictl(t, "runp", "--runtime", "vmpod", path); err == nil {
		t.Fatal("runp through the stand-in shim succeeded")
	}
	b, err := os.ReadFile(record)
	if err != nil {
		t.Fatalf("containerd never ran %s/containerd-shim-vmpod-v2: %v", shimDir, err)
	}
	if got := string(b); !strings.Contains(got, shimDir+"/containerd-shim-vmpod-v2 ") || !strings.Contains(got, " start") {
		t.Errorf("shim invocations:\n%s", got)
	}
	if out := c.MustCrictl(t, "pods", "-q"); strings.TrimSpace(out) != "" {
		t.Logf("pods after the failed runp: %q", out)
	}
}

// hostDefaults lists what is in the places containerd, CNI and NRI write by
// default, so a test can tell that the harness wrote none of them. Other
// tests on the machine may use /run/netns, /run/containerd/s and
// /run/containerd/runc, so only this harness's names count there.
func hostDefaults() map[string][]string {
	out := map[string][]string{}
	for _, dir := range []string{"/run/containerd", "/var/lib/containerd", "/var/lib/cni", "/var/lib/cni/results",
		"/var/lib/cni/networks", "/run/nri", "/etc/cni/net.d", "/run/netns", "/run/containerd/runc/k8s.io"} {
		ents, err := os.ReadDir(dir)
		if err != nil {
			out[dir] = []string{"(" + err.Error() + ")"}
			continue
		}
		for _, e := range ents {
			n := e.Name()
			switch {
			case dir == "/run/containerd" && (n == "s" || n == "runc"):
			case dir == "/run/netns" && !strings.HasPrefix(n, rootPrefix) && !strings.HasPrefix(n, "cni-"):
			default:
				out[dir] = append(out[dir], n)
			}
		}
	}
	return out
}

func cmpHostDefaults(before, after map[string][]string) string {
	var diffs []string
	for dir, names := range after {
		if strings.Join(names, ",") != strings.Join(before[dir], ",") {
			diffs = append(diffs, fmt.Sprintf("%s: %v -> %v", dir, before[dir], names))
		}
	}
	return strings.Join(diffs, "; ")
}
