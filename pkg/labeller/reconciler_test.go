package labeller_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/vmpod/vmpod/internal/testenv/hostcaps"
	"github.com/vmpod/vmpod/pkg/host"
	"github.com/vmpod/vmpod/pkg/labeller"
)

var foreignLabels = map[string]string{
	"kubernetes.io/hostname": "node-1",
	"example.com/kvm":        "true",
	"vmpod.io/pool":          "gold",
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// capsSource is a Capabilities func whose answer a test changes.
type capsSource struct {
	mu  sync.Mutex
	h   host.Host
	err error
}

func (s *capsSource) set(h host.Host, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.h, s.err = h, err
}

func (s *capsSource) read(context.Context) (host.Host, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.h, s.err
}

func nodeWithLabels(labels map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Labels: maps.Clone(labels)}}
}

func union(a, b map[string]string) map[string]string {
	out := maps.Clone(a)
	maps.Copy(out, b)
	return out
}

func TestOnce(t *testing.T) {
	ctx := context.Background()
	tcg, kvm := hostcaps.Golden[host.Host](t, hostcaps.TCG), hostcaps.Golden[host.Host](t, hostcaps.KVM)
	client := fake.NewClientset(nodeWithLabels(foreignLabels))
	src := &capsSource{h: tcg}
	r := &labeller.Reconciler{Nodes: client.CoreV1().Nodes(), NodeName: "node-1", Capabilities: src.read, Log: quietLog()}
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}

	nodeLabels := func() map[string]string {
		t.Helper()
		n, err := client.CoreV1().Nodes().Get(ctx, "node-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n.Labels
	}

	if _, err := r.Once(ctx); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(union(foreignLabels, labeller.Labels(tcg)), nodeLabels()); diff != "" {
		t.Errorf("after the TCG host (-want +got):\n%s", diff)
	}

	// In step: a Get and no write.
	client.ClearActions()
	c, err := r.Once(ctx)
	if err != nil || !c.Empty() {
		t.Fatalf("second Once = %+v, %v; want no change", c, err)
	}
	for _, a := range client.Actions() {
		if a.GetVerb() != "get" {
			t.Errorf("in step, the labeller did %s %s", a.GetVerb(), a.GetResource().Resource)
		}
	}

	src.set(kvm, nil)
	c, err = r.Once(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Remove) == 0 || len(c.Set) == 0 {
		t.Errorf("TCG -> KVM changed %+v, want labels set and removed", c)
	}
	if diff := cmp.Diff(union(foreignLabels, labeller.Labels(kvm)), nodeLabels()); diff != "" {
		t.Errorf("after the KVM host (-want +got):\n%s", diff)
	}

	src.set(host.Host{}, errors.New("libvirt is gone"))
	if _, err := r.Once(ctx); err == nil {
		t.Error("Once with failing capabilities succeeded")
	}
	if diff := cmp.Diff(union(foreignLabels, labeller.Labels(kvm)), nodeLabels()); diff != "" {
		t.Errorf("a failed read changed the labels (-want +got):\n%s", diff)
	}
}

func TestOnceNoNode(t *testing.T) {
	client := fake.NewClientset()
	r := &labeller.Reconciler{Nodes: client.CoreV1().Nodes(), NodeName: "node-1",
		Capabilities: (&capsSource{}).read, Log: quietLog()}
	if _, err := r.Once(context.Background()); err == nil {
		t.Error("Once on a missing node succeeded")
	}
}

// TestRun follows a capability change and repairs a label someone removed,
// then stops with its context.
func TestRun(t *testing.T) {
	tcg, kvm := hostcaps.Golden[host.Host](t, hostcaps.TCG), hostcaps.Golden[host.Host](t, hostcaps.KVM)
	client := fake.NewClientset(nodeWithLabels(foreignLabels))
	nodes := client.CoreV1().Nodes()
	src := &capsSource{h: tcg}
	r := &labeller.Reconciler{Nodes: nodes, NodeName: "node-1", Capabilities: src.read,
		Interval: 100 * time.Millisecond, CapabilitiesInterval: 20 * time.Millisecond, Log: quietLog()}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- r.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	waitLabels := func(what string, want map[string]string) {
		t.Helper()
		var got map[string]string
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			n, err := nodes.Get(context.Background(), "node-1", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got = n.Labels; maps.Equal(got, want) {
				return
			}
		}
		t.Fatalf("%s (-want +got):\n%s", what, cmp.Diff(want, got))
	}

	waitLabels("TCG host", union(foreignLabels, labeller.Labels(tcg)))
	src.set(kvm, nil)
	waitLabels("KVM host", union(foreignLabels, labeller.Labels(kvm)))

	// A failing read keeps the last labels, and a label removed by hand
	// comes back at the next check.
	src.set(host.Host{}, errors.New("libvirt is gone"))
	if _, err := nodes.Patch(context.Background(), "node-1", "application/merge-patch+json",
		[]byte(`{"metadata":{"labels":{"vmpod.io/kvm":null}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitLabels("repaired", union(foreignLabels, labeller.Labels(kvm)))
}
