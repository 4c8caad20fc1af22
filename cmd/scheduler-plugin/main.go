// Command scheduler-plugin is kube-scheduler with the VMPlacement plugin
// registered. Enable it in a KubeSchedulerConfiguration profile
// (docs/scheduler.md); it takes kube-scheduler's flags.
package main

import (
	"fmt"
	"os"

	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register" // for JSON log format registration
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version" // for version metric registration
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	"github.com/vmpod/vmpod/pkg/scheduler/vmplacement"
)

// featureGates are the kube-scheduler feature gates this binary defaults
// differently from kube-scheduler v1.37.2; --feature-gates still overrides
// them.
//
// InPlacePodLevelResourcesVerticalScaling (beta, on by default since 1.36):
// a 1.37 kubelet reports a running pod's status.allocatedResources and
// status.resources with spec.overhead already in them, and the scheduler's
// sum of a pod's requests (component-helpers' PodRequests) takes the larger
// of those and the spec, then adds spec.overhead again, so every running VM
// pod counts its RuntimeClass overhead twice (kubernetes/kubernetes#139627):
// a 2-CPU node took 7 pods of 50m with 100m overhead instead of 13. With the
// gate off the scheduler sums the containers' requests and adds the
// overhead once. Drop this when the pinned Kubernetes has the fix.
var featureGates = map[string]bool{"InPlacePodLevelResourcesVerticalScaling": false}

func main() {
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(featureGates); err != nil {
		fmt.Fprintf(os.Stderr, "feature gates: %v\n", err)
		os.Exit(1)
	}
	cmd := app.NewSchedulerCommand(app.WithPlugin(vmplacement.Name, vmplacement.New))
	os.Exit(cli.Run(cmd))
}
