package vm

import (
	"fmt"
	"os"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// TestInNetnsLockedThread: a thread that entered a network namespace,
// locked to its goroutine, is in it, while the process's other threads
// are not; and the other way round for the process's namespace.
func TestInNetnsLockedThread(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root to make a network namespace: run the tests as root (make test does)")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// The test's namespace by a descriptor: /proc/self shows the main
	// thread's, which may be the one that enters the new namespace.
	orig, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	host := fmt.Sprintf("/proc/self/fd/%d", orig.Fd())

	type result struct{ inOwn, inHost bool }
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			t.Error(err)
			close(done)
			runtime.UnlockOSThread()
			return
		}
		done <- result{inOwn: inNetns("/proc/thread-self/ns/net"), inHost: inNetns(host)}
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			t.Error(err) // the thread stays locked and ends with the goroutine
			return
		}
		runtime.UnlockOSThread()
	}()
	r, ok := <-done
	if !ok {
		return
	}
	if !r.inOwn || r.inHost {
		t.Errorf("on the thread in a new namespace: in it %v (want true), in the test's %v (want false)", r.inOwn, r.inHost)
	}
	if !inNetns(host) {
		t.Error("the test's thread is not in the test's namespace")
	}
}
