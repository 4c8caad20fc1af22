//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/vmpod/vmpod/internal/nsthread"
	"github.com/vmpod/vmpod/internal/ociarchive"
	"github.com/vmpod/vmpod/internal/testenv/ckptarchive"
	"github.com/vmpod/vmpod/internal/testguest"
	"github.com/vmpod/vmpod/pkg/checkpointimage"
)

// TestCheckpointMove moves a running VM pod to the other node, memory and
// all, through Kubernetes' own APIs: the kubelet's checkpoint API on the
// pod's node writes the archive, vm-runtime checkpoint-image makes it an
// image, which reaches the other node (ctr import on the containerd node,
// the node's registry for the VM-only node), and a pod of that image
// there starts where the first VM was: the guest's counter and uptime go
// on, with no restart, and its HTTP server answers on the new pod IP.
// Then a Deployment of two replicas of the image starts there, both from
// the one checkpoint on the one node, behind a Service. Both directions:
// containerd -> VM-only node, and back.
func TestCheckpointMove(t *testing.T) {
	checkLeaks(t)
	doors := frontDoors(t)
	if os.Getenv("VMPOD_E2E_CTR") == "" || os.Getenv("VMPOD_E2E_CRI_REGISTRY") == "" || os.Getenv("VMPOD_E2E_CRI_NETNS") == "" {
		t.Fatal("VMPOD_E2E_CTR, VMPOD_E2E_CRI_REGISTRY and VMPOD_E2E_CRI_NETNS are needed (hack/local-up.sh writes them)")
	}
	base, err := testguest.OpenArchive(testguest.Archive(t), filepath.Join(t.TempDir(), "oci"))
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range [][2]frontDoor{{doors[0], doors[1]}, {doors[1], doors[0]}} {
		from, to := dir[0], dir[1]
		t.Run(from.name+"-to-"+to.name, func(t *testing.T) { moveVM(t, base, from, to) })
	}
}

func moveVM(t *testing.T, base v1.Image, from, to frontDoor) {
	ctx := context.Background()
	// No service account token: a guest with virtio-fs shares cannot be
	// checkpointed (docs/day2.md).
	src := makePod("ckpt").grace(10)
	src.pod.Spec.AutomountServiceAccountToken = new(false)
	from.place(&src.pod.Spec)
	p := create(t, src.obj())
	waitLog(t, p.Name, "VMPOD-GUEST: ready")
	p = waitRunning(t, p.Name)
	kubectlOK(t, p.Name, ckptarchive.CounterScript)
	time.Sleep(time.Second)
	before, upBefore := guestInt(t, p.Name, "cat /run/counter"), guestUptime(t, p.Name)

	// The kubelet's checkpoint API, through the API server's node proxy.
	start := time.Now()
	raw, err := client.CoreV1().RESTClient().Post().AbsPath("/api/v1/nodes", p.Spec.NodeName, "proxy", "checkpoint", namespace, p.Name, "vm").DoRaw(ctx)
	if err != nil {
		t.Fatalf("checkpoint through the kubelet: %v: %s", err, raw)
	}
	took := time.Since(start)
	var reply struct{ Items []string }
	if err := json.Unmarshal(raw, &reply); err != nil || len(reply.Items) != 1 {
		t.Fatalf("the kubelet's checkpoint reply %s: %v", raw, err)
	}
	onNode := reply.Items[0]
	archive := filepath.Join(t.TempDir(), "checkpoint.tar")
	data, err := from.node.run(ctx, `cat "$1" && rm -f "$1"`, onNode)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(archive, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	m := ckptarchive.Check(t, archive)
	t.Logf("%s: kubelet checkpoint API %v, archive %d bytes, guest paused %v", from.name, took.Round(time.Millisecond), len(data), m.Paused.Round(time.Millisecond))
	if st := getPod(t, p.Name).Status.ContainerStatuses; len(st) != 1 || st[0].RestartCount != 0 || st[0].State.Running == nil {
		t.Errorf("the checkpointed pod's container after the checkpoint: %+v, want it running, never restarted", st)
	}
	deletePod(t, p.Name)

	ref := "localhost/vmpod/test-guest:" + uniqueName("moved")
	img, err := checkpointimage.Build(base, archive, t.TempDir(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	deliver(t, to, img, ref)
	// The machine type the VM ran on, which the pod names so that the
	// scheduler plugin keeps it on nodes whose QEMU offers it.
	machine, err := checkpointimage.Machine(img)
	if err != nil || !strings.HasPrefix(machine, "pc-q35-") {
		t.Fatalf("the checkpoint image's machine type: %q, %v; want a versioned q35", machine, err)
	}

	dst := makePod("moved").grace(10).annotation("vmpod.io/machine", machine)
	dst.pod.Spec.AutomountServiceAccountToken = new(false)
	dst.pod.Spec.Containers[0].Image = ref
	to.place(&dst.pod.Spec)
	q := create(t, dst.obj())
	start = time.Now()
	q = waitRunning(t, q.Name)
	var counter int
	if !poll(2*time.Minute, func() bool {
		out, _, code, err := kubectlNoFatal(30*time.Second, "exec", q.Name, "--", "cat", "/run/counter")
		if err != nil || code != 0 {
			return false
		}
		counter, err = strconv.Atoi(strings.TrimSpace(out))
		return err == nil
	}) {
		t.Fatalf("the restored guest on %s does not answer: %s", to.name, describe(q.Name))
	}
	t.Logf("%s: restored pod created to the guest answering an exec: %v", to.name, time.Since(start).Round(time.Millisecond))
	if counter < before {
		t.Errorf("the restored guest's counter is at %d, below the %d it had before the checkpoint: it started over", counter, before)
	}
	if up := guestUptime(t, q.Name); up < upBefore {
		t.Errorf("the restored guest's uptime %.1f s is below the %.1f s before the checkpoint: it booted", up, upBefore)
	}
	if next := guestInt(t, q.Name, "sleep 1; cat /run/counter"); next <= counter {
		t.Errorf("the restored guest's counter stands at %d", next)
	}
	// The guest's HTTP server, listening since before the checkpoint,
	// answers on the new pod IP: the guest leased it when vmpod took its
	// link down and up.
	if out := to.node.httpGet(t, q.Status.PodIP); !strings.Contains(out, "200 OK") {
		t.Errorf("the restored guest's HTTP server on the new pod IP %s: %q", q.Status.PodIP, out)
	}
	if ip := strings.TrimSpace(kubectlOK(t, q.Name, "cat /run/ip")); !strings.HasPrefix(ip, q.Status.PodIP+"/") {
		t.Errorf("the restored guest has the address %s, want the new pod's %s (the first pod had %s)", ip, q.Status.PodIP, p.Status.PodIP)
	}
	t.Logf("%s: restored pod created to the guest answering HTTP on its new IP %s (it had %s): %v", to.name, q.Status.PodIP, p.Status.PodIP, time.Since(start).Round(time.Millisecond))
	if st := getPod(t, q.Name).Status.ContainerStatuses; len(st) != 1 || st[0].RestartCount != 0 {
		t.Errorf("the restored pod's container: %+v, want no restart", st)
	}
	deletePod(t, q.Name)
	snapshotDeployment(t, to, ref, machine)
}

// snapshotDeployment starts a workload from a checkpoint image, as one
// starts from a snapshot: a Deployment of two replicas of ref on the
// door's node, and a Service over them. One replica's VM takes the
// checkpoint's domain, the other is restored beside it (a domain of its
// own name and UUID, its guest given its own pod's MAC); each guest leases
// its own pod's IP, passes its readiness probe there, and the Service
// reaches both, told apart by the address the guest's page shows.
func snapshotDeployment(t *testing.T, d frontDoor, ref, machine string) {
	t.Helper()
	start := time.Now()
	name, sel, _ := d.vmDeployment(t, "snap", 2, func(tmpl *corev1.PodTemplateSpec) {
		tmpl.Annotations = map[string]string{"vmpod.io/machine": machine}
		tmpl.Spec.AutomountServiceAccountToken = new(false)
		tmpl.Spec.Containers[0].Image = ref
	})
	t.Logf("%s: Deployment of 2 replicas of the checkpoint image Available in %v", d.name, time.Since(start).Round(100*time.Millisecond))
	svcs := client.CoreV1().Services(namespace)
	svc, err := svcs.Create(context.Background(), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: corev1.ServiceSpec{Selector: sel,
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	deleteAtCleanup(t, "service", name, nil, svcs.Delete)

	pods := podsOf(t, sel)
	var names []string
	macs := map[string]string{} // the guests' MACs, to their pods
	for _, p := range pods {
		names = append(names, p.Name)
		if ip := strings.TrimSpace(kubectlOK(t, p.Name, "cat /run/ip")); !strings.HasPrefix(ip, p.Status.PodIP+"/") {
			t.Errorf("replica %s's guest holds %s, want its pod's %s", p.Name, ip, p.Status.PodIP)
		}
		mac := strings.TrimSpace(kubectlOK(t, p.Name, "cat /sys/class/net/eth0/address"))
		if mac == "" {
			t.Errorf("replica %s's guest has no MAC", p.Name)
		} else if other, ok := macs[mac]; ok {
			t.Errorf("replicas %s and %s have the guest MAC %s both", other, p.Name, mac)
		}
		macs[mac] = p.Name
		if st := p.Status.ContainerStatuses; len(st) != 1 || st[0].RestartCount != 0 {
			t.Errorf("replica %s's container: %+v, want no restart", p.Name, st)
		}
	}
	waitEndpoints(t, name, names, nil)
	runc := busyboxPod(t)
	seen := map[string]int{}
	for range 30 {
		out, _ := inPod(t, runc, `printf 'GET / HTTP/1.0\r\n\r\n' | timeout 10 nc "$1" 80`, svc.Spec.ClusterIP)
		for _, p := range pods {
			if strings.Contains(out, " "+p.Status.PodIP+"/") {
				seen[p.Name]++
			}
		}
		if len(seen) == len(pods) {
			break
		}
	}
	for _, p := range pods {
		if seen[p.Name] == 0 {
			t.Errorf("%s: the Service never reached replica %s at %s (answers: %v)", d.name, p.Name, p.Status.PodIP, seen)
		}
	}
}

// deliver puts img on the door's node as ref: imported into containerd,
// or pushed to the VM-only node's registry (on its own loopback).
func deliver(t *testing.T, to frontDoor, img v1.Image, ref string) {
	t.Helper()
	if to.node == node {
		archive := filepath.Join(t.TempDir(), "image.oci.tar")
		if err := ociarchive.Write(archive, img, ref, time.Now()); err != nil {
			t.Fatal(err)
		}
		ctr := strings.Fields(os.Getenv("VMPOD_E2E_CTR"))
		out, err := exec.Command(ctr[0], append(ctr[1:], "images", "import", "--platform", "linux/amd64", archive)...).CombinedOutput()
		if err != nil {
			t.Fatalf("ctr images import: %v: %s", err, out)
		}
		t.Cleanup(func() { exec.Command(ctr[0], append(ctr[1:], "images", "rm", ref)...).Run() })
		return
	}
	netnsPath := os.Getenv("VMPOD_E2E_CRI_NETNS")
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := nsthread.InNetns(netnsPath, func() error {
			var err error
			c, err = (&net.Dialer{Timeout: 10 * time.Second}).DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
	r, err := name.ParseReference(strings.Replace(ref, "localhost", os.Getenv("VMPOD_E2E_CRI_REGISTRY"), 1))
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img, remote.WithTransport(&http.Transport{DialContext: dial})); err != nil {
		t.Fatalf("push %s to the VM-only node's registry: %v", ref, err)
	}
}

// kubectlOK runs a shell script in the pod's guest and fails the test
// unless it succeeds.
func kubectlOK(t *testing.T, pod, script string) string {
	t.Helper()
	out, errOut, code := kubectl(t, time.Minute, "exec", pod, "--", "sh", "-c", script)
	if code != 0 {
		t.Fatalf("exec %q in %s: exit %d: %s", script, pod, code, errOut)
	}
	return out
}

func guestInt(t *testing.T, pod, script string) int {
	t.Helper()
	out := kubectlOK(t, pod, script)
	n, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		t.Fatalf("%q in %s: %q", script, pod, out)
	}
	return n
}

func guestUptime(t *testing.T, pod string) float64 {
	t.Helper()
	out := kubectlOK(t, pod, "cat /proc/uptime")
	f, err := strconv.ParseFloat(strings.Fields(out)[0], 64)
	if err != nil {
		t.Fatalf("uptime in %s: %q", pod, out)
	}
	return f
}
