package containerd_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/vmpod/vmpod/internal/procmem"
	"github.com/vmpod/vmpod/internal/testenv/containerd"
	"github.com/vmpod/vmpod/internal/testguest"
)

// What the benchmarks that run many VM pods on one containerd share:
// BenchmarkShimFootprint and BenchmarkDensity.

// vmNode is a containerd whose vmpod runtime is a shim built from the
// repo, with the test guest imported.
type vmNode struct {
	c *containerd.Containerd
	// state is the node daemon's state root.
	state string
}

// startVMNode builds pkg (a path below the repo root, e.g.
// ./cmd/containerd-shim-vmpod-v2) as containerd-shim-vmpod-v2, starts
// containerd with env added to the shims' environment, and imports the
// test guest.
func startVMNode(b testing.TB, pkg string, env []string) *vmNode {
	b.Helper()
	// Short: QEMU's sockets go a few levels below it (108-byte limit).
	state, err := os.MkdirTemp("/tmp", "vmpod-st-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(state) })
	c := containerd.Start(b, containerd.Options{
		ShimDir:  buildShimDir(b, pkg),
		Env:      env,
		VMDaemon: &containerd.VMDaemon{StateRoot: state},
	})
	c.ImportImage(b, testguest.Archive(b))
	return &vmNode{c: c, state: state}
}

// buildShimDir builds pkg (a path below the repo root) and puts it on
// containerd's PATH as containerd-shim-vmpod-v2, with vm-runtime (the
// node daemon) and its jailer next to it.
func buildShimDir(b testing.TB, pkg string) string {
	b.Helper()
	dir := b.TempDir()
	bin := filepath.Join(dir, filepath.Base(pkg))
	for _, p := range []string{pkg, "./cmd/vm-runtime", "./cmd/vmpod-qemu"} {
		out := filepath.Join(dir, filepath.Base(p))
		if p != pkg && out == bin {
			continue
		}
		cmd := exec.Command("go", "build", "-o", out, p)
		cmd.Dir = "../.."
		if b := filepath.Base(p); b == "containerd-shim-vmpod-v2" || b == "vmpod-qemu" {
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0") // as make build
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("build %s: %v\n%s", p, err, out)
		}
	}
	if filepath.Base(bin) != "containerd-shim-vmpod-v2" {
		if err := os.Symlink(bin, filepath.Join(dir, "containerd-shim-vmpod-v2")); err != nil {
			b.Fatal(err)
		}
	}
	return dir
}

// vmPod is one VM pod: its configs as crictl gets them and, once made,
// its sandbox and container IDs.
type vmPod struct {
	cfg      *runtimeapi.PodSandboxConfig
	ctrCfg   *runtimeapi.ContainerConfig
	pod, ctr string
}

// newVMPod is the i-th pod named prefix<i>: one VM container of the test
// guest with 1 vCPU and guestMiB of RAM.
func (n *vmNode) newVMPod(prefix string, i, guestMiB int) *vmPod {
	cfg := n.c.NewPodConfig(fmt.Sprintf("%s%d", prefix, i), "default", fmt.Sprintf("%s-%04d", prefix, i), nil)
	ctr := containerd.NewContainerConfig("vm", testguest.Image)
	ctr.Linux.Resources = containerd.Resources(1000, int64(guestMiB)<<20)
	return &vmPod{cfg: cfg, ctrCfg: ctr}
}

// run makes the pod and its container (runp, create) without starting it.
func (n *vmNode) run(b testing.TB, p *vmPod) {
	b.Helper()
	p.pod = n.c.RunPod(b, p.cfg, "vmpod")
	p.ctr = n.c.CreateContainer(b, p.pod, p.ctrCfg, p.cfg)
}

// removeAll hard-stops and removes the pods, all at once (no ACPI
// shutdowns to wait for), ignoring errors: a cleanup.
func (n *vmNode) removeAll(b testing.TB, pods []*vmPod) {
	var wg sync.WaitGroup
	for _, p := range pods {
		if p.pod == "" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if p.ctr != "" {
				_, _ = n.c.Crictl(b, "stop", "--timeout", "0", p.ctr)
			}
			_, _ = n.c.Crictl(b, "stopp", p.pod)
			_, _ = n.c.Crictl(b, "rmp", "--force", p.pod)
		}()
	}
	wg.Wait()
}

func readAll(b testing.TB, pids []int) []procmem.Process {
	b.Helper()
	ps := make([]procmem.Process, len(pids))
	for i, pid := range pids {
		p, err := procmem.Read(pid)
		if err != nil {
			b.Fatalf("memory of %d: %v", pid, err)
		}
		ps[i] = p
	}
	return ps
}

// pids are the pods' shims and QEMUs.
func (n *vmNode) pids(b testing.TB, pods []*vmPod) (shims, qemus []int) {
	b.Helper()
	shims = make([]int, len(pods))
	qemus = make([]int, len(pods))
	for i, p := range pods {
		shims[i] = n.c.InspectPod(b, p.pod).PID
		qemus[i] = qemuPID(b, n.c, p.ctr)
	}
	if slices.Contains(shims, 0) {
		b.Fatalf("shim pids %v: containerd reported none for a pod", shims)
	}
	return shims, qemus
}

// settleAndSample waits for the pods to settle (the guest agents'
// handshake, containerd's first stats), then
// samples the shims and QEMUs three times, 3 s apart, and returns the last
// sample: the steady state.
func settleAndSample(b testing.TB, shimPIDs, qemuPIDs []int) (shims, qemus []procmem.Process) {
	b.Helper()
	time.Sleep(12 * time.Second)
	for round := 0; round < 3; round++ {
		if round > 0 {
			time.Sleep(3 * time.Second)
		}
		shims, qemus = readAll(b, shimPIDs), readAll(b, qemuPIDs)
	}
	return shims, qemus
}
