package cri

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/vmpod/vmpod/internal/ckpt"
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
	return ckpt.RemoveFile(path)
}
