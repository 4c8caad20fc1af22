//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// busyboxPod starts an ordinary (runc) pod of hack/local/images.sh's
// busybox image on the containerd node and returns its name once it runs.
func busyboxPod(t *testing.T) string {
	t.Helper()
	img := os.Getenv("VMPOD_E2E_BUSYBOX_IMAGE")
	if img == "" {
		t.Fatal("VMPOD_E2E_BUSYBOX_IMAGE is not set (hack/local-up.sh writes it to _output/local/env)")
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: uniqueName("client"), Namespace: namespace},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "sh", Image: img, ImagePullPolicy: corev1.PullNever,
				Command: []string{"/bin/busybox", "sleep", "3600"},
			}},
			TerminationGracePeriodSeconds: new(int64(1)),
		},
	}
	create(t, p)
	waitRunning(t, p.Name)
	return p.Name
}

// inPod runs a busybox command line in a runc pod.
func inPod(t *testing.T, pod, script string, args ...string) (string, int) {
	t.Helper()
	out, errOut, code := kubectl(t, time.Minute, append([]string{"exec", pod, "--", "/bin/busybox", "sh", "-c", script, "sh"}, args...)...)
	return out + errOut, code
}

// TestService: a ClusterIP Service selecting VM pods on both kinds of node
// answers from an ordinary runc pod and from inside another VM (by its DNS
// name), a NodePort Service answers on the node's IP, and readiness gates
// the endpoints: a VM whose readiness probe fails gets no traffic until it
// passes.
func TestService(t *testing.T) {
	checkLeaks(t)
	doors := frontDoors(t)
	name := uniqueName("svc")
	sel := map[string]string{"app": name}
	var backends []string
	for _, d := range doors {
		tmpl := vmTemplate(sel)
		b := &podBuilder{pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: uniqueName("backend"), Namespace: namespace, Labels: sel}, Spec: tmpl.Spec}}
		d.place(&b.pod.Spec)
		create(t, b.obj())
		backends = append(backends, b.pod.Name)
	}
	// A third backend, not ready until the test says so: its probe looks
	// for a file in the guest.
	gated := makePod("gated").readinessExec("test", "-e", "/run/e2e-ready").obj()
	gated.Labels = sel
	create(t, gated)

	svcs := client.CoreV1().Services(namespace)
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: sel,
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}
	svc, err := svcs.Create(context.Background(), svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	deleteAtCleanup(t, "service", name, nil, svcs.Delete)
	for _, b := range backends {
		waitReady(t, b)
	}
	waitLog(t, gated.Name, "VMPOD-GUEST: qemu-ga ready")
	waitEndpoints(t, name, backends, []string{gated.Name})
	clusterIP := svc.Spec.ClusterIP
	fqdn := fmt.Sprintf("%s.%s.svc.cluster.local", name, namespace)

	// answered asks, at most 30 times, until every want backend answered;
	// it returns who answered. get asks once and returns the page.
	answered := func(get func() string, want []string) map[string]int {
		seen := map[string]int{}
		for range 30 {
			out := get()
			for _, b := range append(append([]string{}, backends...), gated.Name) {
				if strings.Contains(out, "vmpod-guest "+b) {
					seen[b]++
				}
			}
			all := true
			for _, b := range want {
				all = all && seen[b] > 0
			}
			if all {
				break
			}
		}
		return seen
	}
	check := func(t *testing.T, from string, seen map[string]int, want []string) {
		t.Helper()
		for _, b := range want {
			if seen[b] == 0 {
				t.Errorf("from %s: backend %s never answered (answers: %v)", from, b, seen)
			}
		}
		if n := seen[gated.Name]; n > 0 && !contains(want, gated.Name) {
			t.Errorf("from %s: the not-ready backend %s answered %d times", from, gated.Name, n)
		}
	}

	runc := busyboxPod(t)
	fromRunc := func() string {
		out, _ := inPod(t, runc, `printf 'GET / HTTP/1.0\r\n\r\n' | timeout 10 nc "$1" 80`, clusterIP)
		return out
	}
	t.Run("ClusterIP from a runc pod", func(t *testing.T) {
		check(t, "a runc pod", answered(fromRunc, backends), backends)
	})
	t.Run("DNS name from a runc pod", func(t *testing.T) {
		if out, code := inPod(t, runc, `nslookup "$1"`, fqdn); code != 0 || !strings.Contains(out, clusterIP) {
			t.Errorf("nslookup %s in a runc pod: exit %d, no %s:\n%s", fqdn, code, clusterIP, out)
		}
	})
	t.Run("ClusterIP by DNS name from inside a VM", func(t *testing.T) {
		from := backends[len(backends)-1] // the VM-only node's
		waitLog(t, from, "VMPOD-GUEST: qemu-ga ready")
		if out := guestExec(t, from, "nslookup", fqdn); !strings.Contains(out, clusterIP) {
			t.Fatalf("nslookup %s in the guest of %s: no %s:\n%s", fqdn, from, clusterIP, out)
		}
		get := func() string { return guestHTTP(t, from, clusterIP, "80") }
		check(t, "a VM", answered(get, backends), backends)
	})
	t.Run("NodePort from the node", func(t *testing.T) {
		ip := os.Getenv("VMPOD_E2E_NODE_IP")
		if ip == "" {
			t.Fatal("VMPOD_E2E_NODE_IP is not set (hack/local-up.sh writes it to _output/local/env)")
		}
		port := strconv.Itoa(int(svc.Spec.Ports[0].NodePort))
		get := func() string {
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			out, _ := node.run(ctx, `exec 3<>"/dev/tcp/$1/$2" && printf 'GET / HTTP/1.0\r\n\r\n' >&3 && timeout 5 cat <&3`, ip, port)
			return out
		}
		check(t, "the node's NodePort "+ip+":"+port, answered(get, backends), backends)
	})
	t.Run("readiness gates the endpoints", func(t *testing.T) {
		guestExec(t, gated.Name, "touch", "/run/e2e-ready")
		waitReady(t, gated.Name)
		all := append(append([]string{}, backends...), gated.Name)
		waitEndpoints(t, name, all, nil)
		check(t, "a runc pod, the gated backend ready", answered(fromRunc, all), all)
	})
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// waitEndpoints waits until the Service's EndpointSlices list the ready
// pods as ready and the not-ready ones as not ready.
func waitEndpoints(t *testing.T, svc string, ready, notReady []string) {
	t.Helper()
	var got map[string]bool
	if !poll(time.Minute, func() bool {
		l, err := client.DiscoveryV1().EndpointSlices(namespace).List(context.Background(), metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc})
		if err != nil {
			return false
		}
		got = map[string]bool{}
		for _, s := range l.Items {
			for _, e := range s.Endpoints {
				if e.TargetRef != nil {
					got[e.TargetRef.Name] = e.Conditions.Ready != nil && *e.Conditions.Ready
				}
			}
		}
		for _, p := range ready {
			if r, ok := got[p]; !ok || !r {
				return false
			}
		}
		for _, p := range notReady {
			if r, ok := got[p]; !ok || r {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("service %s: endpoints (pod: ready) %v, want ready %v and not ready %v", svc, got, ready, notReady)
	}
}
