package vm_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/vmpod/vmpod/internal/testenv/fullfs"
	"github.com/vmpod/vmpod/pkg/virt"
)

// TestOutOfSpaceResumes: a guest whose disk writes find the node's state
// dir full is paused by QEMU, neither failed nor given an error; once room
// is made the runtime lets it run on, its write completes, and the console
// says what happened.
func TestOutOfSpaceResumes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	_, _, root := runtimeForTest(t)
	dir := fullfs.MountIn(t, root, 64<<20)
	// 8 MiB left: enough to make and boot the VM, not for the 12 MiB the
	// guest writes at boot (fill-disk-pod.yaml).
	filler := fullfs.Fill(t, dir)
	fi, err := os.Stat(filler)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filler, fi.Size()-8<<20); err != nil {
		t.Fatal(err)
	}
	g := startGuestIn(ctx, t, dir, "fill-disk-pod.yaml", nil)

	var info virt.Info
	paused := func() bool {
		info, err = shared.conn.Info(ctx, g.name)
		return err == nil && info.PausedOnIOError
	}
	for !paused() {
		if ctx.Err() != nil || g.console.find("VMPOD-GUEST: fill-disk ") != "" {
			t.Fatalf("the VM is not paused on its full disk: %+v, %v; the guest's write: %q", info, err, g.console.find("VMPOD-GUEST: fill-disk "))
		}
		time.Sleep(200 * time.Millisecond)
	}
	// It stays paused while there is no room: no resume, no error in
	// the guest.
	time.Sleep(3 * 2 * time.Second)
	if !paused() {
		t.Fatalf("the VM did not stay paused with its state dir full: %+v, %v", info, err)
	}
	if line := g.console.find("VMPOD-GUEST: fill-disk "); line != "" {
		t.Fatalf("the guest's write ended while its disk was full: %s", line)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	freed := time.Now()
	g.console.waitFor(ctx, t, "vmpod: the VM runs on: the node's state dir")
	resumed := time.Since(freed)
	g.console.waitFor(ctx, t, "VMPOD-GUEST: fill-disk ")
	if got := g.console.find("VMPOD-GUEST: fill-disk "); got != "VMPOD-GUEST: fill-disk wrote 12 MiB" {
		t.Errorf("the guest's write after the resume: %q, want it whole", got)
	}
	t.Logf("resumed %v after the room was made", resumed.Round(100*time.Millisecond))
}
