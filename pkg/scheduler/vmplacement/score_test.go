package vmplacement_test

import (
	"maps"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/vmpod/vmpod/pkg/vmspec/vmspectest"
)

func TestScoreImageLocality(t *testing.T) {
	pod := defaulted(vmspectest.MakePod("p").Memory("1Gi").Obj())
	untagged := defaulted(vmspectest.MakePod("p").Image("localhost/vmpod/other").Memory("1Gi").Obj())
	nodes := []*v1.Node{
		makeNode("big").Image(vmspectest.Image, 2*gi).Obj(),
		makeNode("full").Image(vmspectest.Image, gi).Obj(),
		makeNode("half").Image(vmspectest.Image, gi/2).Obj(),
		makeNode("none").Obj(),
		makeNode("other").Image("localhost/vmpod/other:latest", gi/4).Obj(),
	}
	f := newTestFramework(t, `{"strategyWeight": 0}`, nodes, nil)

	want := map[string]int64{"big": 100, "full": 100, "half": 50, "none": 0, "other": 0}
	if diff := cmp.Diff(want, f.scores(t, pod)); diff != "" {
		t.Errorf("scores (-want +got):\n%s", diff)
	}
	// An image without a tag is :latest, as in node.status.images.
	want = map[string]int64{"big": 0, "full": 0, "half": 0, "none": 0, "other": 100}
	if diff := cmp.Diff(want, f.scores(t, untagged)); diff != "" {
		t.Errorf("scores of an untagged image (-want +got):\n%s", diff)
	}
}

func TestScoreStrategy(t *testing.T) {
	// Three 8Gi nodes with 6Gi, 2Gi and nothing requested.
	nodes := []*v1.Node{
		makeNode("busy").Memory("8Gi").Obj(),
		makeNode("some").Memory("8Gi").Obj(),
		makeNode("empty").Memory("8Gi").Obj(),
	}
	pods := []*v1.Pod{plainPod("a", "6Gi"), plainPod("b", "2Gi")}
	pods[0].Spec.NodeName, pods[1].Spec.NodeName = "busy", "some"
	pod := defaulted(vmspectest.MakePod("p").Memory("1Gi").Obj())

	for _, tc := range []struct {
		args string
		want []string // best first
	}{
		{args: `{"imageLocalityWeight": 0}`, want: []string{"empty", "some", "busy"}},
		{args: `{"imageLocalityWeight": 0, "strategy": "spread"}`, want: []string{"empty", "some", "busy"}},
		{args: `{"imageLocalityWeight": 0, "strategy": "pack"}`, want: []string{"busy", "some", "empty"}},
	} {
		t.Run(tc.args, func(t *testing.T) {
			f := newTestFramework(t, tc.args, nodes, pods)
			scores := f.scores(t, pod)
			if diff := cmp.Diff(tc.want, ranking(scores)); diff != "" {
				t.Errorf("ranking (-want +got):\n%s\nscores: %v", diff, scores)
			}
			if best := scores[tc.want[0]]; best != fwk.MaxNodeScore {
				t.Errorf("best node %s scored %d, want %d (normalized)", tc.want[0], best, fwk.MaxNodeScore)
			}
		})
	}
}

func TestScoreWeights(t *testing.T) {
	// "cached" holds the image but is busy; "empty" has neither.
	nodes := []*v1.Node{
		makeNode("cached").Memory("8Gi").Image(vmspectest.Image, gi).Obj(),
		makeNode("empty").Memory("8Gi").Obj(),
	}
	busy := plainPod("busy", "6Gi")
	busy.Spec.NodeName = "cached"
	pod := defaulted(vmspectest.MakePod("p").Memory("1Gi").Obj())

	for _, tc := range []struct {
		args string
		want []string
	}{
		{args: `{"imageLocalityWeight": 3, "strategyWeight": 1}`, want: []string{"cached", "empty"}},
		{args: `{"imageLocalityWeight": 1, "strategyWeight": 3}`, want: []string{"empty", "cached"}},
	} {
		t.Run(tc.args, func(t *testing.T) {
			f := newTestFramework(t, tc.args, nodes, []*v1.Pod{busy})
			if diff := cmp.Diff(tc.want, ranking(f.scores(t, pod))); diff != "" {
				t.Errorf("ranking (-want +got):\n%s", diff)
			}
		})
	}
}

// TestScoreSkipsOtherPods: PreScore skips pods that are not VM pods, so the
// plugin adds nothing to their scores.
func TestScoreSkipsOtherPods(t *testing.T) {
	nodes := []*v1.Node{
		makeNode("cached").Image("busybox:latest", gi).Obj(),
		makeNode("empty").Obj(),
	}
	f := newTestFramework(t, "", nodes, nil)
	want := map[string]int64{"cached": 0, "empty": 0}
	if diff := cmp.Diff(want, f.scores(t, plainPod("p", "1Gi"))); diff != "" {
		t.Errorf("scores (-want +got):\n%s", diff)
	}
}

// ranking lists node names from the highest score to the lowest, equal
// scores as "a=b" so that a tie never passes for an order.
func ranking(scores map[string]int64) []string {
	names := slices.Sorted(maps.Keys(scores))
	slices.SortStableFunc(names, func(a, b string) int { return int(scores[b] - scores[a]) })
	var out []string
	for i, n := range names {
		if i > 0 && scores[n] == scores[names[i-1]] {
			out[len(out)-1] += "=" + n
			continue
		}
		out = append(out, n)
	}
	return out
}
