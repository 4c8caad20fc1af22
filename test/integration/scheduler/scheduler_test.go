package scheduler

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"k8s.io/component-base/configz"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

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
	return startSchedulerWith(t, cp, profilesYAML, vmplacement.New)
}

// startSchedulerWith is startScheduler with VMPlacement built by factory.
func startSchedulerWith(t testing.TB, cp *controlplane.ControlPlane, profilesYAML string, factory frameworkruntime.PluginFactory) (stop func()) {
	t.Helper()
	opts := options.NewOptions()
	opts.ConfigFile = writeSchedulerConfig(t, cp, profilesYAML)
	opts.SecureServing.BindPort = 0 // no /healthz, /metrics listener

	ctx, cancel := context.WithCancel(context.Background())
	cc, sched, err := app.Setup(ctx, opts, app.WithPlugin(vmplacement.Name, factory))
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

// writeSchedulerConfig writes a KubeSchedulerConfiguration for a scheduler
// talking to cp, whose profiles section is profilesYAML, and returns its
// path.
func writeSchedulerConfig(t testing.TB, cp *controlplane.ControlPlane, profilesYAML string) string {
	t.Helper()
	config := fmt.Sprintf(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %s
  qps: 5000
  burst: 5000
leaderElection:
  leaderElect: false
%s`, cp.Kubeconfig(t), profilesYAML)
	file := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(file, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// runSchedulerBinary builds cmd/scheduler-plugin and runs it as its own
// process with --config from profilesYAML, talking to cp, until the test
// ends (its cleanup, SIGTERM then a bounded wait, runs before the control
// plane's). Unlike startScheduler's, this scheduler has the binary's own
// feature gates (cmd/scheduler-plugin's defaults), not those of this
// process, which the apiserver shares: the binary is what a cluster runs.
// Its log is printed when the test fails.
func runSchedulerBinary(t *testing.T, cp *controlplane.ControlPlane, profilesYAML string) {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "scheduler-plugin")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/vmpod/vmpod/cmd/scheduler-plugin").CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/scheduler-plugin: %v\n%s", err, out)
	}
	logPath := filepath.Join(dir, "scheduler.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close() // the child has its own descriptor
	cmd := exec.Command(bin, "--config", writeSchedulerConfig(t, cp, profilesYAML), "--secure-port", "0")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Errorf("stop the scheduler: %v", err)
		}
		select {
		case <-done:
		case <-time.After(startTimeout):
			t.Errorf("scheduler still running %v after SIGTERM; killing pid %d", startTimeout, cmd.Process.Pid)
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("scheduler log:\n%s", b)
		}
	})
}
