// Command scheduler-plugin is kube-scheduler with the VMPlacement plugin
// registered. Enable it in a KubeSchedulerConfiguration profile
// (docs/scheduler.md); it takes kube-scheduler's flags.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register" // for JSON log format registration
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version" // for version metric registration
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	"github.com/vmpod/vmpod/pkg/scheduler/vmplacement"
)

func main() {
	cmd := app.NewSchedulerCommand(app.WithPlugin(vmplacement.Name, vmplacement.New))
	os.Exit(cli.Run(cmd))
}
