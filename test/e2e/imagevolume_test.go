//go:build e2e

package e2e

import (
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// TestImageVolume: an image volume (volumes[].image) reaches a VM pod's
// guest read-only, on both kinds of node: hack/local/images.sh's busybox
// image, mounted whole and by a subPath naming one of its dirs. The guest
// runs the image's busybox from the share, sees the sub path's files at
// its mountPath, and is refused a write. A subPath naming a file is
// refused, with the mount named.
func TestImageVolume(t *testing.T) {
	checkLeaks(t)
	img := os.Getenv("VMPOD_E2E_BUSYBOX_IMAGE")
	if img == "" {
		t.Fatal("VMPOD_E2E_BUSYBOX_IMAGE is not set (hack/local-up.sh writes it to _output/local/env)")
	}
	for _, d := range frontDoors(t) {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			d.testImageVolume(t, img)
		})
	}
}

func (d frontDoor) testImageVolume(t *testing.T, img string) {
	withImage := func(prefix string, mounts ...corev1.VolumeMount) *podBuilder {
		b := makePod(prefix).grace(10)
		d.place(&b.pod.Spec)
		b.pod.Spec.Volumes = []corev1.Volume{{Name: "tools", VolumeSource: corev1.VolumeSource{
			Image: &corev1.ImageVolumeSource{Reference: img, PullPolicy: corev1.PullIfNotPresent}}}}
		b.pod.Spec.Containers[0].VolumeMounts = mounts
		return b
	}
	// A file is refused (virtio-fs shares dirs), naming the mount; made
	// first, so its refusal is seen while the other boots.
	bad := create(t, withImage("imgvol-file", corev1.VolumeMount{Name: "tools", MountPath: "/sh", SubPath: "bin/sh"}).obj())

	pod := create(t, withImage("imgvol",
		corev1.VolumeMount{Name: "tools", MountPath: "/tools"},
		corev1.VolumeMount{Name: "tools", MountPath: "/bin-tools", SubPath: "bin"}).obj())
	pod = waitRunning(t, pod.Name)
	console := waitLog(t, pod.Name, "VMPOD-GUEST: ready")
	for _, p := range []string{"/tools", "/bin-tools"} {
		if !strings.Contains(console, "VMPOD-GUEST: share "+p+" ok") {
			t.Errorf("the guest did not mount the image volume at %s:\n%s", p, console)
		}
	}
	out, errOut, code := kubectl(t, time.Minute, "exec", pod.Name, "--", "sh", "-c",
		`ls /tools/bin; /tools/bin/busybox echo ran; ls /bin-tools; test -e /bin-tools/bin || echo no-bin-in-sub-path`)
	if want := "busybox\nsh\nran\nbusybox\nsh\nno-bin-in-sub-path\n"; code != 0 || out != want {
		t.Errorf("the guest sees the image volume as %q (exit %d, %s), want %q", out, code, errOut, want)
	}
	for _, p := range []string{"/tools/x", "/bin-tools/x"} {
		if _, errOut, code := kubectl(t, time.Minute, "exec", pod.Name, "--", "sh", "-c", "echo x >"+p); code == 0 || !strings.Contains(errOut, "Read-only file system") {
			t.Errorf("a guest write to %s: exit %d, %q; want it refused (read-only file system)", p, code, errOut)
		}
	}
	t.Logf("event: %s", waitEvent(t, bad.Name, 2*time.Minute, "/sh", "bin/sh"))
	if p := getPod(t, bad.Name); p.Status.Phase == corev1.PodRunning {
		t.Errorf("the pod mounting a file of its image volume is Running")
	}
}
