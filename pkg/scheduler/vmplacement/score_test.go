package vmplacement_test

import (
	"maps"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/vmpod/vmpod/pkg/scheduler/vmplacement"
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

// TestScoreSkipped checks when PreScore skips Score: for a pod that is
// not a VM pod, and for a VM pod whose score is the same on every node it
// is given, which adds the same to every node's total and so cannot
// change the scheduler's choice. It compares each decision with the raw
// scores Score gives when PreScore has not run.
func TestScoreSkipped(t *testing.T) {
	vm := defaulted(vmspectest.MakePod("p").UID("uid-p").Memory("1Gi").Obj())
	busy := plainPod("busy", "4Gi")
	busy.Spec.NodeName = "b"
	tests := []struct {
		name  string
		args  string
		nodes []*v1.Node
		pods  []*v1.Pod
		pod   *v1.Pod
		want  bool // skipped
	}{
		{
			name:  "not a VM pod",
			nodes: []*v1.Node{makeNode("a").Image(vmspectest.Image, gi).Obj(), makeNode("b").Obj()},
			pod:   plainPod("p", "1Gi"),
			want:  true,
		},
		{
			name:  "like nodes, none holding the image",
			nodes: []*v1.Node{makeNode("a").Obj(), makeNode("b").Obj(), makeNode("c").Obj()},
			pod:   vm,
			want:  true,
		},
		{
			name: "like nodes, all holding the image",
			nodes: []*v1.Node{
				makeNode("a").Image(vmspectest.Image, gi).Obj(),
				makeNode("b").Image(vmspectest.Image, gi).Obj(),
			},
			pod:  vm,
			want: true,
		},
		{
			name:  "one node holds the image",
			nodes: []*v1.Node{makeNode("a").Obj(), makeNode("b").Obj(), makeNode("c").Image(vmspectest.Image, gi).Obj()},
			pod:   vm,
		},
		{
			name:  "one node is busier",
			nodes: []*v1.Node{makeNode("a").Obj(), makeNode("b").Obj(), makeNode("c").Obj()},
			pods:  []*v1.Pod{busy},
			pod:   vm,
		},
		{
			name:  "one node is busier, but only image locality counts",
			args:  `{"strategyWeight": 0}`,
			nodes: []*v1.Node{makeNode("a").Obj(), makeNode("b").Obj(), makeNode("c").Obj()},
			pods:  []*v1.Pod{busy},
			pod:   vm,
			want:  true,
		},
		{
			name:  "one node holds the image, but only the strategy counts",
			args:  `{"imageLocalityWeight": 0}`,
			nodes: []*v1.Node{makeNode("a").Obj(), makeNode("b").Obj(), makeNode("c").Image(vmspectest.Image, gi).Obj()},
			pod:   vm,
			want:  true,
		},
		{
			name:  "packing, nodes of different sizes",
			args:  `{"imageLocalityWeight": 0, "strategy": "pack"}`,
			nodes: []*v1.Node{makeNode("a").Obj(), makeNode("b").Memory("8Gi").Obj()},
			pod:   vm,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newTestFramework(t, tc.args, tc.nodes, tc.pods)
			nodes, err := f.snapshot.NodeInfos().List()
			if err != nil {
				t.Fatal(err)
			}
			state := framework.NewCycleState()
			if _, st, _ := f.RunPreFilterPlugins(f.ctx, state, tc.pod); !st.IsSuccess() && !st.IsSkip() {
				t.Fatalf("PreFilter: %v", st)
			}
			if st := f.RunPreScorePlugins(f.ctx, state, tc.pod, nodes); !st.IsSuccess() {
				t.Fatalf("PreScore: %v", st)
			}
			if got := state.GetSkipScorePlugins().Has(vmplacement.Name); got != tc.want {
				t.Errorf("Score skipped: got %v, want %v", got, tc.want)
			}

			// Score without PreScore: its raw scores are equal on every
			// node exactly when PreScore skipped it (a pod that is not a
			// VM pod scores 0 everywhere).
			state = framework.NewCycleState()
			if _, st, _ := f.RunPreFilterPlugins(f.ctx, state, tc.pod); !st.IsSuccess() && !st.IsSkip() {
				t.Fatalf("PreFilter: %v", st)
			}
			list, st := f.RunScorePlugins(f.ctx, state, tc.pod, nodes)
			if !st.IsSuccess() {
				t.Fatalf("Score: %v", st)
			}
			raw := map[string]int64{}
			for _, s := range list {
				for _, r := range s.RawScores {
					raw[s.Name] = r.Score
				}
			}
			if equal := len(slices.Compact(slices.Sorted(maps.Values(raw)))) == 1; equal != tc.want {
				t.Errorf("raw scores %v: all equal is %v, want %v", raw, equal, tc.want)
			}
		})
	}
}
