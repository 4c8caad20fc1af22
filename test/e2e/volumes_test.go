//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// updateTimeout bounds how long a ConfigMap or label change takes to reach
// the guest: the kubelet's sync (a minute, and its jitter) plus virtio-fs's
// one second of cached entries.
const updateTimeout = 3 * time.Minute

// TestVolumes: a VM pod's filesystem volumes reach its guest by virtio-fs,
// on both kinds of node: a ConfigMap and a Secret (mode 0400 kept), the
// projected service-account token, the downward API, an emptyDir on disk
// and one in memory. The guest reads them all, writes to the emptyDirs
// (the node sees the write in the kubelet's dir), is refused a write to a
// read-only volume, and sees a ConfigMap update and a label change within
// the kubelet's sync.
func TestVolumes(t *testing.T) {
	checkLeaks(t)
	for _, d := range frontDoors(t) {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			d.testVolumes(t)
		})
	}
}

func (d frontDoor) testVolumes(t *testing.T) {
	ctx := context.Background()
	name := uniqueName("vol")
	cm, err := client.CoreV1().ConfigMaps(namespace).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"key": "one"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.CoreV1().ConfigMaps(namespace).Delete(ctx, cm.Name, metav1.DeleteOptions{}) })
	sec, err := client.CoreV1().Secrets(namespace).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name}, StringData: map[string]string{"password": "s3cret"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.CoreV1().Secrets(namespace).Delete(ctx, sec.Name, metav1.DeleteOptions{}) })

	b := makePod("vol").grace(10)
	b.pod.Labels = map[string]string{"e2e-volume": "one"}
	spec := &b.pod.Spec
	d.place(spec)
	mode := int32(0o400)
	memLimit := resource.MustParse("16Mi")
	spec.Volumes = []corev1.Volume{
		{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: cm.Name}}}},
		{Name: "secret", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: sec.Name, DefaultMode: &mode}}},
		{Name: "podinfo", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{
			Items: []corev1.DownwardAPIVolumeFile{{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}}}}}},
		{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: &memLimit}}},
	}
	spec.Containers[0].VolumeMounts = []corev1.VolumeMount{
		{Name: "config", MountPath: "/etc/config"},
		{Name: "secret", MountPath: "/etc/secret"},
		{Name: "podinfo", MountPath: "/etc/podinfo"},
		{Name: "data", MountPath: "/data"},
		{Name: "cache", MountPath: "/cache"},
	}
	pod := create(t, b.obj())
	pod = waitRunning(t, pod.Name)
	console := waitLog(t, pod.Name, "VMPOD-GUEST: ready")
	for _, p := range []string{"/etc/config", "/etc/secret", "/etc/podinfo", "/data", "/cache", "/var/run/secrets/kubernetes.io/serviceaccount"} {
		if !strings.Contains(console, "VMPOD-GUEST: share "+p+" ok") {
			t.Errorf("the guest did not mount %s:\n%s", p, console)
		}
	}

	guest := func(script string) (string, string, int) {
		t.Helper()
		return kubectl(t, time.Minute, "exec", pod.Name, "--", "sh", "-c", script)
	}
	out, errOut, code := guest(`cat /etc/config/key; echo; cat /etc/secret/password; echo; stat -L -c %a /etc/secret/password
test -s /var/run/secrets/kubernetes.io/serviceaccount/token && echo token
cat /etc/podinfo/labels; echo
echo from-the-guest >/data/x && cat /data/x
echo in-memory >/cache/y && cat /cache/y`)
	want := "one\ns3cret\n400\ntoken\ne2e-volume=\"one\"\nfrom-the-guest\nin-memory\n"
	if code != 0 || out != want {
		t.Errorf("the guest read its volumes as %q (exit %d, %s), want %q", out, code, errOut, want)
	}
	// The kubelet's volume dirs on the node hold what the guest wrote.
	got, err := d.node.run(ctx, `cat "/var/lib/kubelet/pods/$1/volumes/kubernetes.io~empty-dir/data/x"`, string(pod.UID))
	if err != nil || got != "from-the-guest\n" {
		t.Errorf("the node reads the guest's write to the emptyDir as %q, %v", got, err)
	}
	// Read-only volumes refuse writes, by the share itself.
	for _, p := range []string{"/etc/config/new", "/etc/secret/new", "/var/run/secrets/kubernetes.io/serviceaccount/new"} {
		if _, errOut, code := guest("echo x >" + p); code == 0 || !strings.Contains(errOut, "Read-only file system") {
			t.Errorf("a guest write to %s: exit %d, %q; want it refused (read-only file system)", p, code, errOut)
		}
	}

	// Updates reach the guest within the kubelet's sync: the ConfigMap's
	// alone first (the kubelet's periodic sync of the pod), then a label
	// (the pod's own update).
	cm.Data["key"] = "two"
	if _, err := client.CoreV1().ConfigMaps(namespace).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	d.waitGuestReads(t, pod.Name, "cat /etc/config/key", "two", "the ConfigMap update")
	patch := []byte(`{"metadata":{"labels":{"e2e-volume":"two"}}}`)
	if _, err := client.CoreV1().Pods(namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	d.waitGuestReads(t, pod.Name, "cat /etc/podinfo/labels", `e2e-volume="two"`, "the label change")
}

// waitGuestReads waits until script's output in the pod's guest is want,
// within updateTimeout, and logs how long what changed took to get there.
func (d frontDoor) waitGuestReads(t *testing.T, pod, script, want, what string) {
	t.Helper()
	start := time.Now()
	var seen string
	if !poll(updateTimeout, func() bool {
		seen, _, _ = kubectl(t, time.Minute, "exec", pod, "--", "sh", "-c", script)
		return seen == want
	}) {
		t.Errorf("%s: the guest still reads %q %v later, want %q", what, seen, updateTimeout, want)
		return
	}
	t.Logf("%s reached the guest in %v", what, time.Since(start).Round(time.Second))
}

// TestVolumeRefused: a VM pod that mounts a hostPath gets an error naming
// the volume, from the scheduler and from the node it was bound to; one
// that mounts a file of a volume (a subPath naming a ConfigMap key) gets
// one from the node, which can share directories only.
func TestVolumeRefused(t *testing.T) {
	checkLeaks(t)
	hostPath := func(prefix string) *podBuilder {
		b := makePod(prefix)
		b.pod.Spec.Volumes = []corev1.Volume{{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/etc"}}}}
		b.pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "host", MountPath: "/host"}}
		return b
	}
	t.Run("scheduler", func(t *testing.T) {
		pod := create(t, hostPath("hostpath-sched").obj())
		t.Logf("event: %s", waitEvent(t, pod.Name, time.Minute, "FailedScheduling", "spec.volumes[0].hostPath"))
	})
	ctx := context.Background()
	cm, err := client.CoreV1().ConfigMaps(namespace).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: uniqueName("subpath")}, Data: map[string]string{"app.conf": "v=1"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.CoreV1().ConfigMaps(namespace).Delete(ctx, cm.Name, metav1.DeleteOptions{}) })
	for _, d := range frontDoors(t) {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			nodeName := d.node.name
			if nodeName == "" {
				nodeName = vmpodNode(t)
			}
			b := hostPath("hostpath-" + d.name[:3])
			d.place(&b.pod.Spec)
			b.onNodeNamed(nodeName)
			f := makePod("subpath-" + d.name[:3])
			d.place(&f.pod.Spec)
			f.pod.Spec.Volumes = []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: cm.Name}}}}}
			f.pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "config", MountPath: "/etc/app.conf", SubPath: "app.conf"}}
			pods := []*corev1.Pod{create(t, b.obj()), create(t, f.obj())}
			t.Logf("event: %s", waitEvent(t, pods[0].Name, 2*time.Minute, "/host", "hostPath"))
			t.Logf("event: %s", waitEvent(t, pods[1].Name, 2*time.Minute, "/etc/app.conf is a file", "subPath that is a directory"))
			for _, p := range pods {
				if p := getPod(t, p.Name); p.Status.Phase == corev1.PodRunning {
					t.Errorf("pod %s, refused, is Running", p.Name)
				}
			}
		})
	}
}
