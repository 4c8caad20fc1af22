package cri

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"github.com/containerd/errdefs"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// newNetns makes a network namespace and bind-mounts it at path (as `ip
// netns add` and containerd do), with its loopback up. The thread that
// makes it goes back to the server's namespace, or, if it cannot, ends
// with its locked goroutine.
func newNetns(path string) (retErr error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o444)
	if err != nil {
		return err
	}
	f.Close()
	defer func() {
		if retErr != nil {
			os.Remove(path)
		}
	}()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		err = unix.Unshare(unix.CLONE_NEWNET)
		if err == nil {
			err = unix.Mount("/proc/thread-self/ns/net", path, "none", unix.MS_BIND, "")
		}
		if err == nil {
			var lo netlink.Link
			if lo, err = netlink.LinkByName("lo"); err == nil {
				err = netlink.LinkSetUp(lo)
			}
		}
		if serr := netns.Set(orig); serr != nil {
			errc <- errors.Join(err, serr)
			return // the thread stays locked and ends with the goroutine
		}
		runtime.UnlockOSThread()
		errc <- err
	}()
	if err := <-errc; err != nil {
		unix.Unmount(path, unix.MNT_DETACH)
		return fmt.Errorf("network namespace %s: %w", path, err)
	}
	return nil
}

// removeNetns unmounts and removes the namespace at path; one already gone
// is no error.
func removeNetns(path string) error {
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount network namespace %s: %w", path, err)
	}
	return removeFile(path)
}

// inNetns runs f on a thread locked in the network namespace at path:
// what f does with tun devices, sysctls, netlink and the processes it
// forks (QEMU, through libvirt) happens in the pod's namespace, while the
// server's other threads stay in the node's. Threads f's callees start
// from this one (libvirt's) inherit the namespace; Go starts its own
// threads from a clean template thread.
func inNetns(path string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- errorf(errdefs.ErrInternal, "this thread's network namespace: %v", err)
			return
		}
		defer orig.Close()
		target, err := netns.GetFromPath(path)
		if err != nil {
			errc <- errorf(errdefs.ErrFailedPrecondition, "the pod's network namespace %s: %v", path, err)
			return
		}
		defer target.Close()
		if err := netns.Set(target); err != nil {
			errc <- errorf(errdefs.ErrInternal, "enter the pod's network namespace %s: %v", path, err)
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
