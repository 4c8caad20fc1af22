package vm_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/vmpod/vmpod/pkg/vm"
	"github.com/vmpod/vmpod/pkg/vmspec"
)

// TestDiskCap: a guest that writes past its disk cap gets an I/O error in
// the guest, and its overlay on the node stays within the cap.
func TestDiskCap(t *testing.T) {
	const diskCap = 4 << 20 // the guest writes 12 MiB
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rt, h, root := runtimeForTest(t)
	spec, err := vmspec.FromPod(podFromFile(t, "fill-disk-pod.yaml"))
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
	qemuJail := jailForTest(t, root, dir)
	qemuJail.DiskCap = diskCap
	m, err := rt.Create(ctx, vm.Config{Spec: spec, Host: h, Image: img, Layout: layout, Jail: qemuJail})
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
	if err := m.Start(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if pid, err = m.PID(ctx); err != nil {
		t.Fatal(err)
	}
	console := watchConsole(t, layout.ConsoleLog())
	console.waitFor(ctx, t, "VMPOD-GUEST: fill-disk ")
	if console.find("VMPOD-GUEST: fill-disk wrote") != "" {
		t.Errorf("the guest wrote 12 MiB past a %d MiB cap", diskCap>>20)
	}
	console.waitFor(ctx, t, "VMPOD-GUEST: ready")
	fi, err := os.Stat(layout.Overlay())
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() > diskCap {
		t.Errorf("overlay is %d bytes, past the cap of %d", fi.Size(), diskCap)
	}
	t.Logf("overlay %d bytes under a cap of %d; guest: %s", fi.Size(), diskCap, console.find("VMPOD-GUEST: fill-disk "))
}
