// Package nsthread runs a function on an OS thread of its own, locked in
// another network namespace, while the process's other threads stay
// where they are.
//
// It may import netns, containerd's errdefs and the standard library.
package nsthread

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/containerd/errdefs"
	"github.com/vishvananda/netns"
)

// InNetns runs f on a thread locked in the network namespace at path:
// what f does with tun devices, sysctls, netlink and the processes it
// forks (QEMU, through libvirt) happens in that namespace. Threads f's
// callees start from this one (libvirt's) inherit it; Go starts its own
// threads from a clean template thread. The thread goes back to its
// namespace afterwards, or, if it cannot, ends with its goroutine.
func InNetns(path string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- fmt.Errorf("this thread's network namespace: %v: %w", err, errdefs.ErrInternal)
			return
		}
		defer orig.Close()
		target, err := netns.GetFromPath(path)
		if err != nil {
			errc <- fmt.Errorf("the pod's network namespace %s: %v: %w", path, err, errdefs.ErrFailedPrecondition)
			return
		}
		defer target.Close()
		if err := netns.Set(target); err != nil {
			errc <- fmt.Errorf("enter the pod's network namespace %s: %v: %w", path, err, errdefs.ErrInternal)
			return
		}
		ferr := f()
		if err := netns.Set(orig); err != nil {
			errc <- errors.Join(ferr, err) // the thread ends with the goroutine
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}
