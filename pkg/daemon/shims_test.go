package daemon

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

// TestServedPods: the pods that running shims serve, found by their
// command lines in /proc: vm-runtime's "shim ... -id", and
// containerd-shim-vmpod-v2's as containerd starts it; another program's
// -id is none.
func TestServedPods(t *testing.T) {
	start := func(cmd *exec.Cmd) {
		t.Helper()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	}
	start(&exec.Cmd{Path: os.Args[0], Args: []string{"vm-runtime", "shim", "-namespace", "k8s.io", "-id", "sandbox-reexec", "-address", "/run/x.sock"}})
	// "; :" keeps the shell from exec'ing sleep, so the command line stays.
	start(exec.Command("bash", "-c", `exec -a containerd-shim-vmpod-v2 sh -c 'sleep 60; :' x -namespace k8s.io -id sandbox-start`))
	start(exec.Command("bash", "-c", `exec -a not-a-shim sh -c 'sleep 60; :' x -id sandbox-other`))

	var pods map[string]bool
	var err error
	for range 50 { // until the shells have exec'd
		if pods, err = servedPods("/proc"); err == nil && pods["sandbox-reexec"] && pods["sandbox-start"] {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]bool{"sandbox-reexec": true, "sandbox-start": true, "sandbox-other": false} {
		if pods[id] != want {
			t.Errorf("pod %s served: %v, want %v (all: %v)", id, pods[id], want, pods)
		}
	}
	if !owns(pods, "sandbox-st") || owns(pods, "sandbox-ot") {
		t.Errorf("owns by a dir's prefix: %v, %v; want true, false", owns(pods, "sandbox-st"), owns(pods, "sandbox-ot"))
	}
}
