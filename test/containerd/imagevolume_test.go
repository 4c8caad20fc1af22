package containerd_test

import (
	"encoding/json"
	"os"
	"path/filepath"
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
// a sub path's files at the mount, and cannot write there.
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

	c.MustCrictl(t, "stop", "--timeout", "60", id)
	c.MustCrictl(t, "rm", id)
	c.StopRemovePod(t, podID)
	if entries, _ := os.ReadDir(filepath.Join(state, "pods")); len(entries) > 0 {
		t.Errorf("pod state left: %v", entries)
	}
}
