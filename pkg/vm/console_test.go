package vm_test

import (
	"context"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vmpod/vmpod/pkg/vm"
	"github.com/vmpod/vmpod/pkg/vmspec"
)

type countingWriter struct{ n atomic.Int64 }

func (c *countingWriter) Write(p []byte) (int, error) {
	c.n.Add(int64(len(p)))
	return len(p), nil
}

// TestConsoleFlood: a guest that floods its console (1 MiB) leaves at most
// two log files of the cap on the node, while the runtime's writer (the
// container's stdout) gets all of it.
func TestConsoleFlood(t *testing.T) {
	const logCap = 128 << 10
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	rt, h, root := runtimeForTest(t)
	spec, err := vmspec.FromPod(podFromFile(t, "flood-console-pod.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	img, err := vm.FindImage(containerdiskRootfs(t))
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp(root, "pod-")
	if err != nil {
		t.Fatal(err)
	}
	layout := vm.Layout{Dir: dir}
	out := &countingWriter{}
	m, err := rt.Create(ctx, vm.Config{Spec: spec, Host: h, Image: img, Layout: layout, Jail: jailForTest(t, root, dir),
		ConsoleOut: out, ConsoleLogBytes: logCap})
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	t.Cleanup(func() {
		if err := m.Delete(context.Background()); err != nil {
			t.Errorf("Delete: %v", err)
		}
		assertGone(t, rt, spec.Name, pid, dir)
	})
	start := time.Now()
	if err := m.Start(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if pid, err = m.PID(ctx); err != nil {
		t.Fatal(err)
	}
	console := watchConsole(t, layout.ConsoleLog())
	console.waitFor(ctx, t, "VMPOD-GUEST: flood-console done")
	elapsed := time.Since(start)
	var total int64
	for _, f := range []string{layout.ConsoleLog(), layout.ConsoleLog() + ".1"} {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatalf("%v (the log should have rotated)", err)
		}
		if fi.Size() > logCap {
			t.Errorf("%s is %d bytes, past the cap of %d", f, fi.Size(), logCap)
		}
		total += fi.Size()
	}
	if n := out.n.Load(); n < 1<<20 {
		t.Errorf("the console's writer got %d bytes, want the whole 1 MiB flood", n)
	}
	t.Logf("%d bytes through the console in %v; %d bytes of log on the node", out.n.Load(), elapsed.Round(time.Millisecond), total)
}
