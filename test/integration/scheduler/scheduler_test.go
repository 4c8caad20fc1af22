package scheduler

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/component-base/configz"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"

	"github.com/vmpod/vmpod/internal/testenv/controlplane"
	"github.com/vmpod/vmpod/pkg/scheduler/vmplacement"
)

// startTimeout bounds the wait for the scheduler to stop.
const startTimeout = 60 * time.Second

// startScheduler runs a kube-scheduler with VMPlacement registered, built
// by app.Setup from a KubeSchedulerConfiguration whose profiles section is
// profilesYAML, as cmd/scheduler-plugin builds it from --config. It serves
// no HTTP endpoints and does not elect a leader, and talks to cp. The
// returned stop (also run by t.Cleanup, before the control plane stops)
// ends it and waits.
func startScheduler(t testing.TB, cp *controlplane.ControlPlane, profilesYAML string) (stop func()) {
	t.Helper()
	dir := t.TempDir()
	config := fmt.Sprintf(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %s
  qps: 5000
  burst: 5000
leaderElection:
  leaderElect: false
%s`, cp.Kubeconfig(t), profilesYAML)
	configFile := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(configFile, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}

	opts := options.NewOptions()
	opts.ConfigFile = configFile
	opts.SecureServing.BindPort = 0 // no /healthz, /metrics listener

	ctx, cancel := context.WithCancel(context.Background())
	cc, sched, err := app.Setup(ctx, opts, app.WithPlugin(vmplacement.Name, vmplacement.New))
	if err != nil {
		cancel()
		t.Fatalf("scheduler setup: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx, cc, sched) }()

	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			// Run returns this error whenever it ends without leader election.
			if err != nil && err.Error() != "finished without leader elect" {
				t.Errorf("scheduler: %v", err)
			}
		case <-time.After(startTimeout):
			t.Errorf("scheduler still running %v after stop", startTimeout)
		}
		// app.Run registers its configuration once per process.
		configz.Delete("componentconfig")
	}
	t.Cleanup(stop)
	return stop
}
