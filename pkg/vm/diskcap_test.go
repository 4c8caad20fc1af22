package vm_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/vmpod/vmpod/pkg/vm"
)

// TestDiskCap: a guest that writes past its disk cap gets an I/O error in
// the guest, and its overlay on the node stays within the cap.
func TestDiskCap(t *testing.T) {
	const diskCap = 4 << 20 // the guest writes 12 MiB
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	g := startGuest(ctx, t, "fill-disk-pod.yaml", func(c *vm.Config) {
		c.MemoryLimit, c.Jail.DiskCap = 0, diskCap
	})
	console, layout := g.console, g.layout
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
