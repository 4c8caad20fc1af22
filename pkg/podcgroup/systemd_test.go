//go:build systemdnode

// The systemd driver's test needs systemd as PID 1, which this machine does
// not have: test/nodevm builds this package's tests with -tags systemdnode
// and runs them inside cgroup v1 and v2 node VMs whose PID 1 is systemd.

package podcgroup

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// TestSystemdDriver: the same through systemd scopes in a pod slice.
func TestSystemdDriver(t *testing.T) {
	requireRoot(t)
	if _, err := os.Stat("/run/systemd/system"); err != nil {
		t.Fatalf("built for a systemd node, but systemd is not PID 1 here: %v", err)
	}
	slice := fmt.Sprintf("kubepods-besteffort-podtest%d.slice", os.Getpid())
	// The kubelet makes the pod slice with the pod's limit; a transient
	// slice made here stands in for it.
	out, err := exec.Command("systemd-run", "--slice="+slice, "--unit=vmpod-test-holder", "--property=MemoryMax=268435456", "sleep", "600").CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-run: %v: %s", err, out)
	}
	t.Cleanup(func() {
		_ = exec.Command("systemctl", "stop", "vmpod-test-holder.service").Run()
		_ = exec.Command("systemctl", "stop", slice).Run()
	})
	p, err := Parse(slice + ":cri-containerd:vmtest")
	if err != nil {
		t.Fatal(err)
	}
	if err := exec.Command("systemctl", "set-property", "--runtime", slice, "MemoryMax=268435456").Run(); err != nil {
		t.Fatal(err)
	}
	if got := MemoryLimit(p.PodDir()); got != 256<<20 {
		t.Fatalf("pod slice memory limit = %d, want %d", got, 256<<20)
	}
	testDriver(t, p)
}
