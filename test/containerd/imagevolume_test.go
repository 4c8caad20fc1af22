package containerd_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/vmpod/vmpod/internal/testenv/containerd"
	"github.com/vmpod/vmpod/internal/testguest"
)

// TestCrictlImageVolume: an image volume (a pod's volumes[].image, as the
// kubelet passes it: Mount.image, read-only) reaches the guest through
// containerd 2.4: containerd mounts the image under its state dir, in the
// pod sandbox's own dir, and passes a bind of it (or of its sub path's
// dir) in the container's spec; the node daemon (--containerd-state-dir,
// the harness's) shares it read-only. The guest lists the image's files,
// a sub path's files at the mount, and cannot write there. Each share's
// file server runs jailed (uid, capabilities, seccomp, no new privileges)
// and is gone once the pod is.
func TestCrictlImageVolume(t *testing.T) {
	state, err := os.MkdirTemp("/tmp", "vmpod-st-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(state) })
	c := containerd.Start(t, containerd.Options{
		ShimDir:  shimDir(t),
		VMDaemon: &containerd.VMDaemon{StateRoot: state},
	})
	c.ImportImage(t, testguest.Archive(t))

	pod := c.NewPodConfig("imgvol", "default", "7e57-0024", nil)
	podID := c.RunPod(t, pod, "vmpod")
	ctr := containerd.NewContainerConfig("vm", testguest.Image)
	ctr.Linux.Resources = containerd.Resources(1000, 256<<20)
	// The container's own image, mounted whole and its boot dir alone.
	ctr.Mounts = []*runtimeapi.Mount{
		{ContainerPath: "/img", Readonly: true, Image: &runtimeapi.ImageSpec{Image: testguest.Image}},
		{ContainerPath: "/img-boot", Readonly: true, Image: &runtimeapi.ImageSpec{Image: testguest.Image}, ImageSubPath: "boot"},
	}
	id := c.CreateContainer(t, podID, ctr, pod)

	// Where containerd mounted them: below its state dir, in this
	// sandbox's dir.
	var info struct {
		Info struct {
			RuntimeSpec struct {
				Mounts []struct{ Destination, Source string }
			}
		}
	}
	if err := json.Unmarshal([]byte(c.MustCrictl(t, "inspect", "-o", "json", id)), &info); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(c.Root, "state", "io.containerd.grpc.v1.cri", "image-volumes", podID) + "/"
	sources := map[string]string{}
	for _, m := range info.Info.RuntimeSpec.Mounts {
		sources[m.Destination] = m.Source
	}
	for dst, suffix := range map[string]string{"/img": "", "/img-boot": "/boot"} {
		if src := sources[dst]; !strings.HasPrefix(src, dir) || !strings.HasSuffix(src, suffix) {
			t.Errorf("containerd's source of %s: %q, want one below %s ending %q", dst, src, dir, suffix)
		}
	}

	c.MustCrictl(t, "start", id)
	logs := waitLogs(t, c, id, "VMPOD-GUEST: ready", 4*time.Minute)
	for _, p := range []string{"/img", "/img-boot"} {
		if !strings.Contains(logs, "VMPOD-GUEST: share "+p+" ok") {
			t.Errorf("the guest did not mount %s:\n%s", p, logs)
		}
	}
	for _, tt := range []struct {
		cmd  []string
		want string // in the output; "" the command must fail
	}{
		{[]string{"ls", "/img/disk", "/img/boot"}, "disk.qcow2"},
		{[]string{"ls", "/img-boot"}, "vmlinuz"},
		{[]string{"ls", "/img-boot/boot"}, ""},
		{[]string{"touch", "/img/written"}, ""},
		{[]string{"touch", "/img-boot/written"}, ""},
	} {
		out, err := c.Crictl(t, append([]string{"exec", "-s", id}, tt.cmd...)...)
		switch {
		case tt.want == "" && err == nil:
			t.Errorf("%q in the guest: %q, want it to fail", tt.cmd, out)
		case tt.want != "" && (err != nil || !strings.Contains(out, tt.want)):
			t.Errorf("%q in the guest: %q, %v; want %q in it", tt.cmd, out, err, tt.want)
		}
	}

	// The shares' file servers: jailed (a uid of their own, the
	// capabilities a file server needs and no others, seccomp, no new
	// privileges), one serving each share; gone with the pod.
	servers := fileServers(t, dir)
	workers := 0
	for _, p := range servers {
		if statusField(p.status, "Seccomp_filters") != "2" {
			continue // the parent that waits for its sandboxed worker
		}
		workers++
		uids := strings.Fields(statusField(p.status, "Uid"))
		if len(uids) != 4 || uids[0] == "0" || uids[0] != uids[1] || uids[0] != uids[2] || uids[0] != uids[3] {
			t.Errorf("file server %d: Uid %q, want one non-root uid", p.pid, uids)
		}
		for k, want := range map[string]string{"NoNewPrivs": "1", "Seccomp": "2", "CapEff": "00000000000000db", "CapBnd": "0000000000000000"} {
			if got := statusField(p.status, k); got != want {
				t.Errorf("file server %d: %s %q, want %q", p.pid, k, got, want)
			}
		}
	}
	if workers != 2 {
		t.Errorf("%d jailed file servers serve the pod's image volumes, want 2 (one per share): %+v", workers, servers)
	}

	c.MustCrictl(t, "stop", "--timeout", "60", id)
	c.MustCrictl(t, "rm", id)
	c.StopRemovePod(t, podID)
	if entries, _ := os.ReadDir(filepath.Join(state, "pods")); len(entries) > 0 {
		t.Errorf("pod state left: %v", entries)
	}
	// (A bounded wait: a server's parent reaps its worker as it ends.)
	deadline := time.Now().Add(10 * time.Second)
	for _, p := range servers {
		for {
			_, err := os.Stat(fmt.Sprintf("/proc/%d", p.pid))
			if err != nil {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("file server %d is still there after the pod's removal", p.pid)
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

type fileServer struct {
	pid             int
	status, cmdline string
}

// fileServers are the live virtiofsd processes whose command line names a
// path below dir.
func fileServers(t *testing.T, dir string) []fileServer {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []fileServer
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); filepath.Base(exe) != "virtiofsd" {
			continue
		}
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil || !strings.Contains(string(cmd), dir) {
			continue
		}
		out = append(out, fileServer{pid: pid, status: string(st), cmdline: strings.ReplaceAll(string(cmd), "\x00", " ")})
	}
	return out
}

// statusField is a field of /proc/<pid>/status.
func statusField(status, key string) string {
	for _, line := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
