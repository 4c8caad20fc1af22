package vmplacement_test

import (
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/vmpod/vmpod/pkg/vmspec"
	"github.com/vmpod/vmpod/pkg/vmspec/vmspectest"
)

// BenchmarkFilterScore is the plugin's share of one scheduling cycle for a
// VM pod: PreFilter, Filter on each of 1,000 nodes, PreScore, Score and
// NormalizeScore, with every node already running some VM pods. The
// snapshot does not change between iterations, as for all but the one
// node a binding changes in a real cluster.
func BenchmarkFilterScore(b *testing.B) {
	const nodes = 1000
	for _, perNode := range []int{0, 10, 50} {
		b.Run(fmt.Sprintf("nodes=%d/vms-per-node=%d", nodes, perNode), func(b *testing.B) {
			var ns []*v1.Node
			var pods []*v1.Pod
			for i := range nodes {
				name := fmt.Sprintf("node-%04d", i)
				n := makeNode(name).KVM().Memory("512Gi")
				if i%2 == 0 {
					n.Image(vmspectest.Image, gi)
				}
				ns = append(ns, n.Obj())
				for j := range perNode {
					p := vmspectest.MakePod(fmt.Sprintf("%s-%d", name, j)).UID(fmt.Sprintf("%s-%d", name, j)).Memory("1Gi").NodeName(name)
					if j%2 == 0 {
						p.Annotation(vmspec.AnnotationAccel, "tcg")
					}
					pods = append(pods, defaulted(p.Obj()))
				}
			}
			f := newTestFramework(b, "", ns, pods)
			nodeInfos, err := f.snapshot.NodeInfos().List()
			if err != nil {
				b.Fatal(err)
			}
			pod := defaulted(vmspectest.MakePod("p").CPU("2").Memory("2Gi").Annotation(vmspec.AnnotationCPUFeatures, "avx2").Obj())

			b.ReportAllocs()
			for b.Loop() {
				state := framework.NewCycleState()
				if _, st, _ := f.RunPreFilterPlugins(f.ctx, state, pod); !st.IsSuccess() {
					b.Fatal(st)
				}
				for _, ni := range nodeInfos {
					if st := f.RunFilterPlugins(f.ctx, state, pod, ni); !st.IsSuccess() {
						b.Fatal(st)
					}
				}
				if st := f.RunPreScorePlugins(f.ctx, state, pod, nodeInfos); !st.IsSuccess() {
					b.Fatal(st)
				}
				if _, st := f.RunScorePlugins(f.ctx, state, pod, nodeInfos); !st.IsSuccess() {
					b.Fatal(st)
				}
			}
		})
	}
}
